import { errorMessage } from '../../../lib/errors.js';
import { bearer, httpGet } from './http-probe.js';
import type { AskOptions } from '../../engines/known-answer-options.js';

/** How this engine is asked (EngineKind.knownAnswerAsk): what it offers beyond a plain completion. */
export type { AskOptions };

/*
 * The known-answer check (issue 36): READY means "answers correctly", not
 * "answers". An engine woken without its weights passes /health, lists its
 * model and holds its GPU memory, and generates garbage: vLLM at level 2
 * woken without reload_weights ("!!!!!!!!!!!!", vLLM PR #54235; issue
 * #29341), SGLang resumed without a CPU backup of its weights (its
 * maintainer on sgl-project/sglang#6367: "the params paused are not
 * protected"). Only a generation can tell.
 *
 * How it judges. At the shard's first READY the agent asks the engine for a
 * greedy completion (temperature 0) of KNOWN_PROMPT, a counting sequence
 * whose continuation every working language model predicts with near
 * certainty, and records the answer. After a wake it asks again and
 * compares only the first COMPARED_WORDS words: greedy decoding is
 * deterministic up to floating-point differences between batch shapes,
 * which can flip a token only where two candidates are nearly tied, and
 * that happens in late tokens and low-confidence text, not in the first
 * numbers of a count. Should the first words still differ, the same answer
 * carries the engine's top-5 logprobs at the first position, and it passes
 * when the recorded first token is among them: a healthy engine whose first
 * token was a near tie has the recorded one among its best five; an engine
 * on garbage weights has neither. The tokens are compared as the engine
 * names them: by id on vLLM (`return_tokens_as_token_ids`, "token_id:N"),
 * by text on SGLang, whose OpenAI route keys its top logprobs by text only
 * (S:python/sglang/srt/entrypoints/openai/utils.py:33-38) (review
 * engine-fidelity-3 E15).
 *
 * A failed ask is no answer (E2). Only a received answer that differs is
 * "wrong" (a wake FAILED, a shard UNHEALTHY); a timeout, a 429/503, a refused
 * or reset connection is "not obtained": the shard stays as it was, with the
 * reason, and is asked again with backoff (known-answer-retry.ts). A woken
 * engine runs the requests it held first: vLLM queues what arrives while it
 * is paused and runs it FCFS once it resumes
 * (V:vllm/v1/engine/core.py:828-857, 905-921); SGLang holds new requests in
 * its tokenizer until /continue_generation
 * (S:python/sglang/srt/managers/tokenizer_manager.py:804-805, 2025-2029);
 * and behind max_num_seqs long generations a short request waits minutes.
 *
 * The ask pins its sampling, so an engine's generation_config.json defaults
 * (V:vllm/entrypoints/openai/completion/protocol.py:315-345) cannot change
 * the argmax between the record and the check: temperature 0,
 * repetition_penalty 1, top_k -1 (vLLM "quietly accept[s] -1 as disabled",
 * V:vllm/sampling_params.py:589-593; SGLang's own default,
 * S:python/sglang/srt/entrypoints/openai/protocol.py:358), top_p 1, min_p 0
 * and a fixed seed.
 */

/** What the engine is asked; plain completion, so chat and base models alike continue it. */
export const KNOWN_PROMPT = '1, 2, 3, 4, 5, 6, 7, 8,';
/** Tokens asked for: a few, so the check costs four decode steps (a wake is READY that much later). */
export const KNOWN_ANSWER_TOKENS = 4;
/** Words of the answer compared (see above). */
export const COMPARED_WORDS = 3;
/** Longest answer recorded (the state file keeps it). */
export const KNOWN_ANSWER_MAX_CHARS = 512;
/** Longest first token recorded ("token_id:151643", or a token's text). */
export const KNOWN_TOKEN_MAX_CHARS = 64;
/** Limit of one ask, the default of supervisor.known_answer_timeout; a later one waits longer (known-answer-retry.ts). */
export const KNOWN_ANSWER_TIMEOUT_MS = 30_000;
/** Alternatives asked at each position: the OpenAI API's most, and under vLLM's default --max-logprobs (20). */
export const TOP_LOGPROBS = 5;
/** The fixed seed of the ask (greedy decoding uses none; pinned all the same). */
export const KNOWN_ANSWER_SEED = 0;
/** vLLM's header naming the DP rank a request goes to (V:vllm/entrypoints/generate/base/serving.py:205-218). */
export const DP_RANK_HEADER = 'X-data-parallel-rank';

/** Where and how to ask the engine. */
export interface KnownAnswerTarget {
  baseUrl: string;
  /** The served model name, as /v1/models lists it. */
  model: string;
  apiKey: string;
  signal: AbortSignal;
  timeoutMs?: number;
  ask?: AskOptions;
}

/** The answer recorded at the first READY: its text and its first token as the engine names it. */
export interface KnownAnswer {
  text: string;
  token?: string;
}

export type Asked = { ok: true; text: string; token?: string; top?: string[] } | { ok: false; reason: string };

/** The body of the ask (see the file's comment for each pinned field). */
export function askBody(model: string, ask: AskOptions = {}): Record<string, unknown> {
  return {
    model,
    prompt: KNOWN_PROMPT,
    max_tokens: KNOWN_ANSWER_TOKENS,
    temperature: 0,
    repetition_penalty: 1,
    top_k: -1,
    top_p: 1,
    min_p: 0,
    seed: KNOWN_ANSWER_SEED,
    stream: false,
    logprobs: TOP_LOGPROBS,
    ...(ask.tokenIds ? { return_tokens_as_token_ids: true } : {}),
    ...(ask.priority !== undefined ? { priority: ask.priority } : {}),
  };
}

/** Asks the engine (DP rank `rank` when given) for its greedy answer to KNOWN_PROMPT, with its top tokens at the first position. */
export async function askKnownAnswer(t: KnownAnswerTarget, rank?: number): Promise<Asked> {
  const at = rank === undefined ? '' : ` (DP rank ${rank})`;
  let res: { status: number; body: string };
  try {
    res = await httpGet(`${t.baseUrl}/v1/completions`, {
      timeoutMs: t.timeoutMs ?? KNOWN_ANSWER_TIMEOUT_MS,
      signal: t.signal,
      headers: { ...bearer(t.apiKey), ...(rank === undefined ? {} : { [DP_RANK_HEADER]: String(rank) }) },
      post: { json: JSON.stringify(askBody(t.model, t.ask)) },
    });
  } catch (err) {
    t.signal.throwIfAborted();
    return { ok: false, reason: `POST /v1/completions${at}: ${errorMessage(err)}` };
  }
  if (res.status !== 200) return { ok: false, reason: `POST /v1/completions${at} answered ${res.status}: ${oneLine(res.body, 160)}` };
  const parsed = parseCompletion(res.body);
  return parsed.ok || !at ? parsed : { ok: false, reason: parsed.reason.replace('POST /v1/completions', `POST /v1/completions${at}`) };
}

/** The text, first token and top first tokens of an OpenAI completion body. */
export function parseCompletion(body: string): Asked {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, reason: `POST /v1/completions answered no JSON: ${oneLine(body, 80)}` };
  }
  type Logprobs = { tokens?: unknown[]; top_logprobs?: unknown[] } | null;
  const choice = (parsed as { choices?: unknown[] } | null)?.choices?.[0] as { text?: unknown; logprobs?: Logprobs } | undefined;
  if (typeof choice?.text !== 'string') return { ok: false, reason: 'POST /v1/completions answered no choices[0].text' };
  const first = choice.logprobs?.tokens?.[0];
  const top = choice.logprobs?.top_logprobs?.[0];
  return {
    ok: true,
    text: choice.text.slice(0, KNOWN_ANSWER_MAX_CHARS),
    ...(typeof first === 'string' && first.length <= KNOWN_TOKEN_MAX_CHARS ? { token: first } : {}),
    ...(top && typeof top === 'object' ? { top: Object.keys(top as Record<string, unknown>) } : {}),
  };
}

/** The first `n` words of an answer. */
export function firstWords(text: string, n = COMPARED_WORDS): string[] {
  return text.trim().split(/\s+/).filter(Boolean).slice(0, n);
}

/** Whether `now` gives the recorded answer's first words. */
export function sameAnswer(recorded: string, now: string): boolean {
  const a = firstWords(recorded);
  const b = firstWords(now);
  // An answer of no words (the model ended at once) is compared whole.
  if (a.length === 0) return recorded.trim() === now.trim();
  return a.length === b.length && a.every((w, i) => w === b[i]);
}

/**
 * An answer that is one character repeated ("!!!!!!!!"): what vLLM and
 * SGLang generate on weights they no longer hold. What a wake is judged by
 * when nothing was recorded before the sleep (a state file of an older agent).
 */
export function isDegenerate(text: string): boolean {
  const t = text.replace(/\s+/g, '');
  return t.length >= 2 && [...t].every((c) => c === t[0]);
}

/** The judgement of one check: only `differs` is an answer that is wrong. */
export type Verdict = { kind: 'same'; how: string } | { kind: 'differs'; reason: string } | { kind: 'not-obtained'; reason: string };
/** A verdict on an answer received. */
export type Answered = Exclude<Verdict, { kind: 'not-obtained' }>;

/** How the reason of a failed ask begins, in the shard's error and the log. */
export const NOT_OBTAINED = 'known answer not obtained';

/**
 * Asks the engine again (each DP rank where it has several) and judges its
 * answer against `recorded` (see the file's comment); without a recorded
 * answer, only a degenerate one fails. A rank that answers wrong decides;
 * else a rank not answering leaves the verdict "not obtained".
 */
export async function checkKnownAnswer(t: KnownAnswerTarget, recorded: KnownAnswer | undefined): Promise<Verdict> {
  const ranks = (t.ask?.dpRanks ?? 1) > 1 ? Array.from({ length: t.ask?.dpRanks ?? 1 }, (_, i) => i) : [undefined];
  const verdicts = await Promise.all(ranks.map(async (rank) => judge(await askKnownAnswer(t, rank), recorded, rank)));
  const decided = verdicts.find((v) => v.kind === 'differs') ?? verdicts.find((v) => v.kind === 'not-obtained');
  if (decided) return decided;
  const first = verdicts[0] as Verdict;
  return verdicts.length > 1 && first.kind === 'same' ? { kind: 'same', how: `${first.how} on each of its ${verdicts.length} DP ranks` } : first;
}

function judge(now: Asked, recorded: KnownAnswer | undefined, rank: number | undefined): Verdict {
  if (!now.ok) return { kind: 'not-obtained', reason: now.reason };
  const who = rank === undefined ? 'it' : `DP rank ${rank}`;
  if (recorded === undefined) {
    if (isDegenerate(now.text)) return { kind: 'differs', reason: `${who} answers ${JSON.stringify(now.text)} to ${JSON.stringify(KNOWN_PROMPT)}` };
    return { kind: 'same', how: `answers ${JSON.stringify(now.text)} (no answer was recorded before the sleep: only garbage is ruled out)` };
  }
  if (sameAnswer(recorded.text, now.text)) return { kind: 'same', how: `gives its known answer ${JSON.stringify(firstWords(now.text).join(' '))}` };
  // A near tie at the first token: the recorded one is among the engine's best five there.
  if (recorded.token !== undefined && now.top?.includes(recorded.token)) {
    return { kind: 'same', how: `its known first token ${JSON.stringify(recorded.token)} is among its top ${TOP_LOGPROBS} first tokens` };
  }
  // A record of an older agent holds no token: its first word, by the decoded top tokens.
  const first = firstWords(recorded.text, 1)[0] ?? '';
  if (recorded.token === undefined && first && now.top?.some((tok) => tok.trim() !== '' && first.startsWith(tok.trim()))) {
    return { kind: 'same', how: `its known answer ${JSON.stringify(first)} is among its top ${TOP_LOGPROBS} first tokens` };
  }
  return {
    kind: 'differs',
    reason: `${who} answers ${JSON.stringify(oneLine(now.text, 80))} to ${JSON.stringify(KNOWN_PROMPT)}, where it answered ${JSON.stringify(oneLine(recorded.text, 80))} before`,
  };
}

function oneLine(text: string, max: number): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, max);
}
