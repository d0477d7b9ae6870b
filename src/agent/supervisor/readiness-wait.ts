import { setTimeout as sleep } from 'node:timers/promises';
import { PROBE_TIMEOUT_MS, probeReady } from './http-probe.js';

/** First wait between readiness probes; doubles up to READY_POLL_MAX_MS. Fast first, because small models load in seconds. */
export const READY_POLL_MIN_MS = 100;
export const READY_POLL_MAX_MS = 2000;

export type ReadinessOutcome = { ready: true } | { ready: false; reason: string };

/**
 * Probes an HTTP rank until /health answers 200 and /v1/models lists
 * `servedModelName`, or `timeoutMs` passes (with the last reason it was not
 * ready). Returns at once when `signal` aborts: the caller reads why from
 * its own state (the shard died, was stopped, the agent is going away).
 */
export async function waitUntilServing(opts: {
  baseUrl: string;
  servedModelName: string;
  timeoutMs: number;
  signal: AbortSignal;
}): Promise<ReadinessOutcome> {
  const { signal } = opts;
  const deadline = Date.now() + opts.timeoutMs;
  let delayMs = READY_POLL_MIN_MS;
  let lastReason = 'not probed yet';
  while (!signal.aborted) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    let result: Awaited<ReturnType<typeof probeReady>>;
    try {
      result = await probeReady(opts.baseUrl, opts.servedModelName, { timeoutMs: Math.min(PROBE_TIMEOUT_MS, remaining), signal });
    } catch {
      continue; // aborted: the loop head ends it
    }
    if (signal.aborted) break;
    if (result.ok) return { ready: true };
    lastReason = result.reason;
    await sleep(Math.min(delayMs, Math.max(0, deadline - Date.now())), undefined, { signal }).catch(() => {});
    delayMs = Math.min(delayMs * 2, READY_POLL_MAX_MS);
  }
  return { ready: false, reason: lastReason };
}

/** Waits `settleMs` for a worker rank (no HTTP API): staying alive that long is its readiness. Ends early on `signal`. */
export async function waitStaysAlive(settleMs: number, signal: AbortSignal): Promise<void> {
  await sleep(settleMs, undefined, { signal }).catch(() => {});
}
