import { errorMessage } from '../../../lib/errors.js';
import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';
import { bearer, httpGet, PROBE_BODY_MAX_BYTES } from '../probes/http-probe.js';
import { readGauge } from '../probes/read-gauge.js';

/*
 * Whether an adopted engine sleeps, asked of the engine rather than taken
 * from its state file. The file can be wrong in both directions: an agent
 * stopped (SIGTERM past the admin socket's grace, or kill -9) while its
 * `ctl wake` waited on the engine leaves "asleep" on disk while the engine
 * goes on to finish the wake, since vLLM runs a utility call once it is on
 * the EngineCore's queue whatever became of the HTTP client
 * (V:vllm/v1/engine/core.py:1417-1446, 1534-1547 at 2f41c894); a sleep the
 * file never took (its write failed: state-file-writer.ts says so in the
 * log) or one someone else asked (the keyless /sleep, security review 3,
 * S6) leaves "awake" on disk while the engine sleeps. Adopted by the file,
 * the first was reported SLEEPING while it could serve, and the second READY
 * while it held no weights (its requests queue unscheduled, core.py:880-882),
 * then UNHEALTHY, "something called its /sleep".
 */

/**
 * How long the engine may take to say whether it sleeps. vLLM answers
 * /is_sleeping between its other utility calls, in order (core.py:1417-1446):
 * a wake or a level-2 reload still running at the restart holds it back that
 * long, so past this the state file is trusted as before; the readiness wait
 * after it still has the adoption's whole timeout.
 */
export const ADOPTED_SLEEP_QUERY_MS = 15_000;

/** What the engine said: asleep (at a level its gauges name, when they do), awake, or nothing that could be read. */
export type FoundSleep = { asleep: true; level?: 1 | 2 } | { asleep: false } | { unknown: string };

/** Where the engine is asked and with what. */
export interface AskAsleepOptions {
  baseUrl: string;
  api: EngineSleepApi;
  /** The key its sleep calls take (vLLM's dev routes sit behind --api-key). */
  apiKey: string;
  signal: AbortSignal;
  /** Default ADOPTED_SLEEP_QUERY_MS. */
  timeoutMs?: number;
}

/** Asks the engine whether it sleeps (api.asleepQuery), and at which level from its gauges; never throws. */
export async function askAsleep(o: AskAsleepOptions): Promise<FoundSleep> {
  if (!o.api.asleepQuery) return { unknown: 'the engine has no query for it' };
  const timeoutMs = o.timeoutMs ?? ADOPTED_SLEEP_QUERY_MS;
  let asleep: unknown;
  try {
    const res = await httpGet(`${o.baseUrl}${o.api.asleepQuery}`, { timeoutMs, signal: o.signal, headers: bearer(o.apiKey), maxBytes: PROBE_BODY_MAX_BYTES });
    if (res.status !== 200) return { unknown: `GET ${o.api.asleepQuery} answered ${res.status}` };
    asleep = (JSON.parse(res.body) as { is_sleeping?: unknown }).is_sleeping;
  } catch (err) {
    return { unknown: `GET ${o.api.asleepQuery}: ${errorMessage(err)}` };
  }
  if (typeof asleep !== 'boolean') return { unknown: `GET ${o.api.asleepQuery} gave no is_sleeping` };
  if (!asleep) return { asleep: false };
  const level = o.api.levelGauges ? await gaugedLevel(o, o.api.levelGauges) : undefined;
  return level ? { asleep: true, level } : { asleep: true };
}

/** The level the engine's gauges name; undefined when neither is 1 (a partial wake sets both to 0: async_llm.py:979-983). */
async function gaugedLevel(o: AskAsleepOptions, gauges: Readonly<Record<1 | 2, string>>): Promise<1 | 2 | undefined> {
  try {
    const res = await httpGet(`${o.baseUrl}/metrics`, { timeoutMs: o.timeoutMs ?? ADOPTED_SLEEP_QUERY_MS, signal: o.signal });
    if (res.status !== 200) return undefined;
    if (readGauge(res.body, gauges[2]) === 1) return 2;
    if (readGauge(res.body, gauges[1]) === 1) return 1;
  } catch {
    // Unread: the safe level is chosen below.
  }
  return undefined;
}

/** What the adoption does with the engine's answer, beside its record (`recordedLevel`: undefined when recorded awake). */
export type AdoptedSleep =
  /** The record stands: it agrees, or the engine said nothing. */
  | { kind: 'as-recorded'; why?: string }
  /** Recorded awake, asleep: adopted SLEEPING at `level`. */
  | { kind: 'asleep'; level: 1 | 2; why: string }
  /** Recorded asleep, awake: adopted as awake, READY only once its known answer is checked. */
  | { kind: 'awake'; why: string };

/**
 * Judges the engine's answer against its record. Level unknown (its gauges
 * read 0 after a wake cut short, or unread) is 2: a level-2 wake (weights,
 * reload, KV cache) brings back an engine asleep at either level, at worst
 * reading its weights again, while a level-1 wake of one asleep at level 2
 * leaves it serving garbage (vLLM #29341).
 */
export function judgeAdoptedSleep(recordedLevel: number | undefined, found: FoundSleep): AdoptedSleep {
  if ('unknown' in found) return { kind: 'as-recorded', why: `the engine did not say whether it sleeps (${found.unknown}); adopted as its state file records` };
  const recorded = recordedLevel === 1 || recordedLevel === 2;
  if (found.asleep && !recorded) {
    const level = found.level ?? 2;
    return { kind: 'asleep', level, why: `the engine sleeps (level ${found.level ?? 'unknown, taken as 2'}) though its state file recorded it awake` };
  }
  if (!found.asleep && recorded) return { kind: 'awake', why: `the engine is awake though its state file recorded it asleep at level ${recordedLevel}: its wake finished after the agent stopped` };
  return { kind: 'as-recorded' };
}
