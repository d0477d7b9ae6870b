import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type AskOptions, type Asked, askKnownAnswer, KNOWN_PROMPT, sameAnswer } from '../supervisor/probes/known-answer.js';
import type { KnownAnswerBook } from '../supervisor/probes/known-answer-book.js';

/*
 * Each adapter proven by its own answer (issue 53). After a load the engine
 * is asked the known-answer prompt (supervisor/probes/known-answer.ts:
 * greedy, sampling pinned) twice: by the base model's name and by the
 * adapter's. A load that silently failed answers 404 by the adapter's name
 * (vLLM "The model `x` does not exist.") or, worse, answers as the base
 * does (AIBrix #235: reported running, never loaded); an engine serving
 * another adapter's weights under this name (vLLM #47724, #12199) answers
 * other than this adapter's bytes did at their first load on this base,
 * which the book keeps by (adapter digest, base). The base's own answer
 * must not change from the shard's first proof: a load that corrupted the
 * base (a slot overwritten) is caught there.
 *
 * No answer is no verdict: a timeout, 429 or 503 (a busy engine) is asked
 * again a few times, then the adapter is "unproven", never FAILED.
 */

export interface ProofTarget {
  baseUrl: string;
  apiKey: string;
  /** The shard's served model name: the base's answer is asked by it. */
  baseModel: string;
  ask?: AskOptions;
  signal: AbortSignal;
  /** The model a request names to reach adapter `name` (SGLang: `<base>:<name>`, EngineAdapterApi.requestModel); the name itself by default. */
  adapterModel?: (name: string) => string;
}

export interface ProofPolicy {
  attempts: number;
  delayMs: number;
  timeoutMs: number;
}

/** Three asks a second apart, each of 30 s at most: an engine too busy for that is "unproven" and asked again at the next pass. */
export const ADAPTER_PROOF_POLICY: ProofPolicy = { attempts: 3, delayMs: 1000, timeoutMs: 30_000 };

export type Proof = { kind: 'proven'; how: string; answer: string } | { kind: 'failed'; reason: string } | { kind: 'unproven'; reason: string };

export interface ProofKey {
  /** The adapter's content digest. */
  adapterDigest: string;
  /** The base's identity: the shard's model digest, else its model as named. */
  base: string;
}

const bookKey = (k: ProofKey) => ({ digest: k.adapterDigest, profile: `lora-on:${k.base}`, engineVersion: '' });

/** What the base answered at the shard's first proof; set by the caller's first proof (baseline.text undefined). */
export interface BaseBaseline {
  text?: string;
}

export async function proveAdapter(t: ProofTarget, name: string, key: ProofKey, book: KnownAnswerBook, baseline: BaseBaseline, policy = ADAPTER_PROOF_POLICY): Promise<Proof> {
  const base = await askUntil(t, t.baseModel, policy);
  if (!base.ok) return { kind: 'unproven', reason: `unproven: the base model did not answer (${base.reason}); asked again later` };
  if (baseline.text === undefined) baseline.text = base.text;
  else if (!sameAnswer(baseline.text, base.text)) {
    return { kind: 'failed', reason: `after loading ${name} the base model answers ${q(base.text)} to ${q(KNOWN_PROMPT)}, where it answered ${q(baseline.text)} before; restart the shard` };
  }
  const own = await askUntil(t, t.adapterModel?.(name) ?? name, policy);
  if (!own.ok) {
    if (/ answered 404/.test(own.reason)) return { kind: 'failed', reason: `the engine said it loaded ${name} but does not serve it (${own.reason}); load it again` };
    return { kind: 'unproven', reason: `unproven: ${name} did not answer (${own.reason}); asked again later` };
  }
  const agrees = same(own.text, base.text);
  const recorded = book.get(bookKey(key));
  if (recorded) {
    // The reference is the adapter's own answer: equal to the base's or not, what these bytes answered before is what they must answer now.
    if (sameAnswer(recorded.text, own.text)) {
      return { kind: 'proven', how: `gives its recorded answer ${q(own.text)} (base: ${agrees ? 'the same, as at its first load' : q(base.text)})`, answer: own.text };
    }
    if (agrees) {
      return { kind: 'failed', reason: `${name} answers ${q(own.text)}, as the base model does, where these bytes answered ${q(recorded.text)} at their first load on this base: the engine is not applying it; unload and load it again` };
    }
    return { kind: 'failed', reason: `${name} answers ${q(own.text)}, where these bytes answered ${q(recorded.text)} at their first load on this base (base answers ${q(base.text)}): the engine serves other weights under its name` };
  }
  if (agrees) {
    /*
     * First load, and the adapter answers as its base does. A real adapter
     * may (a small rank, a prompt outside its domain, an untrained one whose
     * lora_B is zero); an engine serving the base under the adapter's name
     * does too. The engines refuse a name they never loaded (vLLM: 404 "The
     * model `x` does not exist.", V:vllm/entrypoints/serve/engine/serving.py:40-66;
     * SGLang `<base>:<x>`: 400 "Got LoRA adapter that has never been loaded",
     * S:python/sglang/srt/managers/tokenizer_manager.py:3315-3319), so an
     * answer by this name comes from an adapter the engine holds: recorded as
     * its answer, against which a later load is judged. An engine that
     * answers a name it never loaded as well (SGLang asked by a bare name
     * serves the base, S:python/sglang/srt/entrypoints/openai/serving_base.py:40-53)
     * tells nothing by names: unproven, not recorded.
     */
    const absent = `llmgw-absent-${randomBytes(4).toString('hex')}`;
    const control = await askUntil(t, t.adapterModel?.(absent) ?? absent, policy);
    if (control.ok) {
      return { kind: 'unproven', reason: `unproven: ${name} answers ${q(own.text)} as the base model does, and so does ${absent}, a name the engine never loaded: its answers by name cannot tell an adapter from none; asked again later` };
    }
    if (!refused(control.reason)) return { kind: 'unproven', reason: `unproven: ${name} answers as the base model does, and the engine did not answer a name it never loaded (${control.reason}); asked again later` };
    await book.record(bookKey(key), { text: own.text });
    return { kind: 'proven', how: `answers ${q(own.text)}, as its base does (an adapter may agree with its base on a prompt; the engine refuses a name it never loaded); recorded as its answer`, answer: own.text };
  }
  await book.record(bookKey(key), { text: own.text });
  return { kind: 'proven', how: `answers ${q(own.text)} (base: ${q(base.text)}); recorded as its answer`, answer: own.text };
}

/** The engine's refusal of a model name: 404 (vLLM) or 400 (SGLang's ValueError). */
const refused = (reason: string) => / answered 40[04]/.test(reason);

async function askUntil(t: ProofTarget, model: string, policy: ProofPolicy): Promise<Asked> {
  let last: Asked = { ok: false, reason: 'not asked' };
  for (let i = 0; i < policy.attempts; i++) {
    if (i > 0) await sleep(policy.delayMs, undefined, { signal: t.signal });
    last = await askKnownAnswer({ baseUrl: t.baseUrl, apiKey: t.apiKey, model, signal: t.signal, timeoutMs: policy.timeoutMs, ask: t.ask });
    // A 404 or 400 is an answer (the engine has no such model, or refuses it), not a busy engine.
    if (last.ok || refused(last.reason)) return last;
  }
  return last;
}

/**
 * Whole answers, spaces aside, for the adapter against its base: an adapter
 * may differ from its base only in a late token. Against records, the first
 * words (sameAnswer), as the known-answer check compares them.
 */
const same = (a: string, b: string) => a.replace(/\s+/g, ' ').trim() === b.replace(/\s+/g, ' ').trim();

const q = (text: string) => JSON.stringify(text.replace(/\s+/g, ' ').trim().slice(0, 80));
