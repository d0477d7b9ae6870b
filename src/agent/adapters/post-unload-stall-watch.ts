import { setTimeout as sleep } from 'node:timers/promises';
import { bearer, httpGet, PROBE_TIMEOUT_MS } from '../supervisor/probes/http-probe.js';
import { readCounters, readGauges } from '../supervisor/probes/read-gauge.js';

/*
 * An engine that stalls after an unload (SGLang #36894: after `n > 1`
 * traffic its unload leaves the scheduler waiting for ever, no log, the
 * process alive). The supervisor's stall watch judges by
 * supervisor.stall_timeout (60 s) at the health interval; right after an
 * unload the agent watches closer, for POST_UNLOAD_WATCH_MS. Its gauges
 * cannot say it: a deadlocked SGLang scheduler no longer publishes them
 * (they are written by its loop, S:python/sglang/srt/managers/scheduler_metrics_mixin.py),
 * so they keep the last batch's figures. What says it is a request of the
 * agent's own: a one-token completion of the base model, asked when the
 * unload is asked and again each second it answers; one that has no answer
 * within POST_UNLOAD_STALL_MS while the engine's progress counters did not
 * move is a stall, said at once (within 5 s of the unload: the limit plus
 * one /metrics read). A busy engine moves its counters, and is not judged
 * by its queue; an idle one answers the ask.
 */

/** No answer to a one-token ask, and no progress, for this long after an unload is a stall. */
export const POST_UNLOAD_STALL_MS = 3000;
/** How long after an unload the engine is watched. */
export const POST_UNLOAD_WATCH_MS = 15_000;
/** Pause between two asks that were answered. */
export const POST_UNLOAD_ASK_EVERY_MS = 1000;

export interface StallWatchTarget {
  /** The engine's API (`http://127.0.0.1:<port>`). */
  baseUrl: string;
  apiKey: string;
  /** The served base model, asked for one token. */
  model: string;
  /** EngineWatch.inFlightGauges (running and waiting) and progressCounters. */
  inFlightGauges: readonly string[];
  progressCounters: readonly string[];
}

export interface StallWatchOptions {
  stallMs?: number;
  watchMs?: number;
  signal: AbortSignal;
}

/** Watches the engine after an unload; resolves with the stall's one-line reason, or undefined when none was seen. */
export async function watchAfterUnload(t: StallWatchTarget, opts: StallWatchOptions): Promise<string | undefined> {
  const stallMs = opts.stallMs ?? POST_UNLOAD_STALL_MS;
  const end = performance.now() + (opts.watchMs ?? POST_UNLOAD_WATCH_MS);
  while (performance.now() < end && !opts.signal.aborted) {
    const before = await progress(t, opts.signal);
    const answered = await askOneToken(t, stallMs, opts.signal);
    if (opts.signal.aborted) return undefined;
    if (!answered) {
      const after = await progress(t, opts.signal);
      if (before === undefined || after === undefined || after.progress === before.progress) {
        const waiting = after?.inFlight ?? 0;
        const queued = waiting > 0 ? `${waiting} request${waiting === 1 ? '' : 's'} waiting or running` : 'requests waiting';
        return `stalled: ${queued}, a one-token completion had no answer in ${Math.round(stallMs / 1000)} s and no token was generated`;
      }
      continue;
    }
    try {
      await sleep(POST_UNLOAD_ASK_EVERY_MS, undefined, { signal: opts.signal });
    } catch {
      return undefined;
    }
  }
  return undefined;
}

async function askOneToken(t: StallWatchTarget, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
  try {
    const body = JSON.stringify({ model: t.model, prompt: '1', max_tokens: 1, temperature: 0 });
    const r = await httpGet(`${t.baseUrl}/v1/completions`, { timeoutMs, signal, headers: bearer(t.apiKey), post: { json: body } });
    // Any answer, an error too, is an engine that is not stuck.
    return r.status > 0;
  } catch {
    return false;
  }
}

async function progress(t: StallWatchTarget, signal: AbortSignal): Promise<{ progress: number | undefined; inFlight: number | undefined } | undefined> {
  try {
    const r = await httpGet(`${t.baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal });
    if (r.status !== 200) return undefined;
    return { progress: readCounters(r.body, t.progressCounters), inFlight: readGauges(r.body, t.inFlightGauges) };
  } catch {
    return undefined;
  }
}
