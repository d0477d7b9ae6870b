import { setTimeout as sleep } from 'node:timers/promises';
import { httpGet, PROBE_TIMEOUT_MS } from '../supervisor/probes/http-probe.js';
import { readCounters, readGauges } from '../supervisor/probes/read-gauge.js';
import { StallDetector } from '../supervisor/probes/stall-detector.js';

/*
 * An engine that stalls after an unload (SGLang #36894: after `n > 1`
 * traffic its unload leaves the scheduler waiting for ever, no log, the
 * process alive and /health answering). The supervisor's stall watch judges
 * by supervisor.stall_timeout (60 s) at the health interval (10 s); right
 * after an unload the agent watches closer: the engine's requests running
 * and waiting, and its progress counters, read every POLL_MS with a stall
 * timeout of STALL_MS, so a stall is said within 5 s of requests waiting
 * (STALL_MS + POLL_MS + one read's time), and only when requests wait: an
 * idle engine never stalls.
 */

/** No progress with requests waiting for this long after an unload is a stall. */
export const POST_UNLOAD_STALL_MS = 3000;
/** How often the engine's /metrics is read while watching. */
export const POST_UNLOAD_POLL_MS = 250;
/** How long after an unload the engine is watched. */
export const POST_UNLOAD_WATCH_MS = 15_000;

export interface StallWatchTarget {
  /** The engine's API (`http://127.0.0.1:<port>`): /metrics is read there. */
  baseUrl: string;
  /** EngineWatch.inFlightGauges (running and waiting) and progressCounters. */
  inFlightGauges: readonly string[];
  progressCounters: readonly string[];
}

export interface StallWatchOptions {
  stallMs?: number;
  pollMs?: number;
  watchMs?: number;
  signal: AbortSignal;
}

/** Watches the engine after an unload; resolves with the stall's one-line reason, or undefined when none was seen (or the engine exports no series). */
export async function watchAfterUnload(t: StallWatchTarget, opts: StallWatchOptions): Promise<string | undefined> {
  const detector = new StallDetector({ stallTimeoutMs: opts.stallMs ?? POST_UNLOAD_STALL_MS });
  const end = performance.now() + (opts.watchMs ?? POST_UNLOAD_WATCH_MS);
  while (performance.now() < end && !opts.signal.aborted) {
    let text: string | undefined;
    try {
      const r = await httpGet(`${t.baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal: opts.signal });
      text = r.status === 200 ? r.body : undefined;
    } catch {
      text = undefined;
    }
    if (text !== undefined) {
      const v = detector.observe({ atMs: performance.now(), requestsRunning: readGauges(text, t.inFlightGauges), progress: readCounters(text, t.progressCounters) });
      if (v.state === 'unknown') return undefined;
      if (v.state === 'stalled') return v.reason.replace(/^stalled: (\d+) requests? running/, (_, n) => `stalled: ${n} request${n === '1' ? '' : 's'} waiting or running`);
    }
    try {
      await sleep(opts.pollMs ?? POST_UNLOAD_POLL_MS, undefined, { signal: opts.signal });
    } catch {
      return undefined;
    }
  }
  return undefined;
}
