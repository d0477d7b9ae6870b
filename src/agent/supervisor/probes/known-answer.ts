import { errorMessage } from '../../../lib/errors.js';
import { bearer, httpGet } from './http-probe.js';

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
 * numbers of a count. Should the first words still differ, it asks once more
 * with the engine's top-5 logprobs at the first position, and accepts when
 * the recorded first word begins with one of them: a healthy engine whose
 * first token was a near tie has the recorded one among its best five; an
 * engine on garbage weights has neither.
 */

/** What the engine is asked; plain completion, so chat and base models alike continue it. */
export const KNOWN_PROMPT = '1, 2, 3, 4, 5, 6, 7, 8,';
/** Tokens asked for: a few, so the check costs four decode steps (a wake is READY that much later). */
export const KNOWN_ANSWER_TOKENS = 4;
/** Words of the answer compared (see above). */
export const COMPARED_WORDS = 3;
/** Longest answer recorded (the state file keeps it). */
export const KNOWN_ANSWER_MAX_CHARS = 512;
/** Limit of one known-answer generation: a short one, but behind whatever a woken engine had queued. */
export const KNOWN_ANSWER_TIMEOUT_MS = 30_000;

/** Where and how to ask the engine. */
export interface KnownAnswerTarget {
  baseUrl: string;
  /** The served model name, as /v1/models lists it. */
  model: string;
  apiKey: string;
  signal: AbortSignal;
  timeoutMs?: number;
}

export type Asked = { ok: true; text: string; firstTokens?: string[] } | { ok: false; reason: string };

/** Asks the engine for its greedy answer to KNOWN_PROMPT, with `topLogprobs` alternatives at each position when given. */
export async function askKnownAnswer(t: KnownAnswerTarget, topLogprobs = 0): Promise<Asked> {
  const body = {
    model: t.model,
    prompt: KNOWN_PROMPT,
    max_tokens: KNOWN_ANSWER_TOKENS,
    temperature: 0,
    stream: false,
    ...(topLogprobs > 0 ? { logprobs: topLogprobs } : {}),
  };
  let res: { status: number; body: string };
  try {
    res = await httpGet(`${t.baseUrl}/v1/completions`, {
      timeoutMs: t.timeoutMs ?? KNOWN_ANSWER_TIMEOUT_MS,
      signal: t.signal,
      headers: bearer(t.apiKey),
      post: { json: JSON.stringify(body) },
    });
  } catch (err) {
    t.signal.throwIfAborted();
    return { ok: false, reason: `POST /v1/completions: ${errorMessage(err)}` };
  }
  if (res.status !== 200) return { ok: false, reason: `POST /v1/completions answered ${res.status}: ${oneLine(res.body, 160)}` };
  return parseCompletion(res.body);
}

/** The text (and top first tokens, when asked) of an OpenAI completion body. */
export function parseCompletion(body: string): Asked {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, reason: `POST /v1/completions answered no JSON: ${oneLine(body, 80)}` };
  }
  const choice = (parsed as { choices?: unknown[] } | null)?.choices?.[0] as { text?: unknown; logprobs?: { top_logprobs?: unknown[] } | null } | undefined;
  if (typeof choice?.text !== 'string') return { ok: false, reason: 'POST /v1/completions answered no choices[0].text' };
  const top = choice.logprobs?.top_logprobs?.[0];
  const firstTokens = top && typeof top === 'object' ? Object.keys(top as Record<string, unknown>) : undefined;
  return { ok: true, text: choice.text.slice(0, KNOWN_ANSWER_MAX_CHARS), ...(firstTokens ? { firstTokens } : {}) };
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

export type Verdict = { ok: true; how: string } | { ok: false; reason: string };

/**
 * Asks the engine again and judges its answer against `recorded` (see the
 * file's comment); without a recorded answer, only a degenerate one fails.
 */
export async function checkKnownAnswer(t: KnownAnswerTarget, recorded: string | undefined): Promise<Verdict> {
  const now = await askKnownAnswer(t);
  if (!now.ok) return { ok: false, reason: now.reason };
  if (recorded === undefined) {
    if (isDegenerate(now.text)) return { ok: false, reason: `it answers ${JSON.stringify(now.text)} to ${JSON.stringify(KNOWN_PROMPT)}` };
    return { ok: true, how: `answers ${JSON.stringify(now.text)} (no answer was recorded before the sleep: only garbage is ruled out)` };
  }
  if (sameAnswer(recorded, now.text)) return { ok: true, how: `gives its known answer ${JSON.stringify(firstWords(now.text).join(' '))}` };
  // A near tie at the first token: the recorded one is among the engine's best five there.
  const second = await askKnownAnswer(t, 5);
  const first = firstWords(recorded, 1)[0] ?? '';
  if (second.ok && first && second.firstTokens?.some((tok) => tok.trim() !== '' && first.startsWith(tok.trim()))) {
    return { ok: true, how: `its known answer ${JSON.stringify(first)} is among its top 5 first tokens` };
  }
  return {
    ok: false,
    reason: `it answers ${JSON.stringify(oneLine(now.text, 80))} to ${JSON.stringify(KNOWN_PROMPT)}, where it answered ${JSON.stringify(oneLine(recorded, 80))} before`,
  };
}

function oneLine(text: string, max: number): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, max);
}
