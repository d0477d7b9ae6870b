import { formatDuration } from '../../../lib/duration.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import type { PortOwnerCheck } from './port-owner-check.js';
import { waitStaysAlive, waitUntilServing } from './readiness-wait.js';

/** How a readiness wait ended, with the words the shard's transition or error carries. */
export type Readiness = { ready: true; why: string } | { ready: false; message: string };

/**
 * Waits for the readiness test of the rank: with `baseUrl`, /health answers
 * from the engine's own socket (`portOwner`) and the served model is listed
 * within `timeoutMs`; without, the engine stays alive `settleMs`. Ends early
 * on `signal`; the caller checks the shard's state after it, since a death
 * or stop meanwhile decides instead. `onWaiting` hears a squatter on the
 * port, and undefined once it is gone (see waitUntilServing).
 */
export async function awaitReadiness(opts: {
  baseUrl: string | undefined;
  servedModelName: string;
  watch: EngineWatch;
  settleMs: number;
  timeoutMs: number;
  signal: AbortSignal;
  portOwner?: PortOwnerCheck;
  onWaiting?: (squatted: string | undefined) => void;
}): Promise<Readiness> {
  if (!opts.baseUrl) {
    await waitStaysAlive(opts.settleMs, opts.signal);
    return { ready: true, why: `stayed alive ${formatDuration(opts.settleMs)}` };
  }
  const byModel = opts.watch.readiness === 'model-listed';
  const outcome = await waitUntilServing({
    baseUrl: opts.baseUrl,
    servedModelName: byModel ? opts.servedModelName : undefined,
    healthPath: opts.watch.healthPath,
    apiKey: opts.watch.apiKey,
    probeTimeoutMs: opts.watch.probeTimeoutMs,
    timeoutMs: opts.timeoutMs,
    signal: opts.signal,
    portOwner: opts.portOwner,
    onWaiting: opts.onWaiting,
  });
  if (outcome.ready) {
    return { ready: true, why: byModel ? `answers ${opts.watch.healthPath} and lists ${JSON.stringify(opts.servedModelName)}` : `worker rank answers ${opts.watch.healthPath}` };
  }
  return { ready: false, message: `not ready after ${formatDuration(opts.timeoutMs)}: ${outcome.reason}` };
}
