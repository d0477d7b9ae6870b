import { setTimeout as sleep } from 'node:timers/promises';
import { PROBE_TIMEOUT_MS, type ProbeResult, probeHealth, probeReady } from './http-probe.js';
import type { PortOwnerCheck } from './port-owner-check.js';

/**
 * Time between readiness ticks. From the engine's first answer to READY on
 * the stream must be at most 100 ms (issue 18), so a tick has to come well
 * inside that. A tick costs the engine nothing while its port is closed (the
 * port-owner check's connect is refused by the kernel), and once the engine
 * itself listens it costs two small GETs (see bench/RESULTS.md, figure 11,
 * for what that is to the engine).
 */
export const READY_TICK_MS = 50;
/**
 * Without a port-owner check (a host with no /proc/net/tcp) every tick is an
 * HTTP probe: then the old backoff, from READY_POLL_MIN_MS doubling up to
 * READY_POLL_MAX_MS, so a loading engine is not probed 20 times a second.
 */
export const READY_POLL_MIN_MS = 100;
export const READY_POLL_MAX_MS = 2000;

export type ReadinessOutcome = { ready: true } | { ready: false; reason: string };

/**
 * Probes an HTTP rank until /health answers 200 and /v1/models lists
 * `servedModelName`, from a socket of the engine's own (`portOwner`), or
 * `timeoutMs` passes (with the last reason it was not ready). A port held by
 * another process is never probed: its answers mean nothing, and the agent
 * has no business talking to it. `onWaiting` hears each new reason for not
 * being ready (the caller reports a squatter; it is called again with
 * undefined once the reason is gone). Returns at once when `signal` aborts:
 * the caller reads why from its own state (the shard died, was stopped, the
 * agent is going away).
 */
export async function waitUntilServing(opts: {
  baseUrl: string;
  /** The model /v1/models must list; undefined: /health alone decides (a worker rank's own /health). */
  servedModelName: string | undefined;
  /** The engine's health path (default /health) and API key for /v1 (default none). */
  healthPath?: string;
  apiKey?: string;
  /** The least limit a probe needs (SGLang's health check takes over a second); the rest of the wait otherwise, at most PROBE_TIMEOUT_MS. */
  probeTimeoutMs?: number;
  timeoutMs: number;
  signal: AbortSignal;
  /** Who listens on the port; without it, every tick probes (and backs off). */
  portOwner?: PortOwnerCheck;
  onWaiting?: (squatted: string | undefined) => void;
}): Promise<ReadinessOutcome> {
  const { signal } = opts;
  const deadline = Date.now() + opts.timeoutMs;
  let backoffMs = READY_POLL_MIN_MS;
  let lastReason = 'not probed yet';
  let squatted: string | undefined;
  const setSquatted = (reason: string | undefined) => {
    if (reason === squatted) return;
    squatted = reason;
    opts.onWaiting?.(reason);
  };
  while (!signal.aborted) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const owner = opts.portOwner ? await opts.portOwner({ loading: true }) : undefined;
    if (signal.aborted) break;
    let delayMs = READY_TICK_MS;
    if (owner?.owner === 'nobody') {
      lastReason = 'nothing listens on the port yet (still loading)';
      setSquatted(undefined);
    } else if (owner?.owner === 'other') {
      lastReason = owner.reason;
      setSquatted(owner.reason);
    } else {
      setSquatted(undefined);
      let result: ProbeResult;
      const limitMs = Math.max(PROBE_TIMEOUT_MS, opts.probeTimeoutMs ?? 0);
      const probe = { timeoutMs: Math.min(limitMs, remaining), signal, healthPath: opts.healthPath };
      try {
        result =
          opts.servedModelName === undefined
            ? await probeHealth(opts.baseUrl, probe)
            : await probeReady(opts.baseUrl, opts.servedModelName, { ...probe, apiKey: opts.apiKey });
      } catch {
        continue; // aborted: the loop head ends it
      }
      if (signal.aborted) break;
      if (result.ok) return { ready: true };
      // A probe the deadline cut short says nothing of the engine: the reason
      // is the last probe that had its full limit (a slow answer near the end
      // must not hide "does not list the model").
      const cutByDeadline = remaining < limitMs && Date.now() >= deadline;
      if (!cutByDeadline || lastReason === 'not probed yet') lastReason = result.reason;
      if (owner === undefined || owner.owner === 'unknown') {
        delayMs = backoffMs;
        backoffMs = Math.min(backoffMs * 2, READY_POLL_MAX_MS);
      }
    }
    const pauseMs = Math.min(delayMs, Math.max(0, deadline - Date.now()));
    // While nothing listens, the pause ends early once the port is listed (one shared poll, LISTEN_POLL_MS).
    if (owner?.owner === 'nobody' && opts.portOwner?.untilListed) await opts.portOwner.untilListed(pauseMs, signal);
    else await sleep(pauseMs, undefined, { signal }).catch(() => {});
  }
  return { ready: false, reason: lastReason };
}

/** Waits `settleMs` for a worker rank (no HTTP API): staying alive that long is its readiness. Ends early on `signal`. */
export async function waitStaysAlive(settleMs: number, signal: AbortSignal): Promise<void> {
  await sleep(settleMs, undefined, { signal }).catch(() => {});
}
