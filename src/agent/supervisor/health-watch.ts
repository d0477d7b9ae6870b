import { errorMessage } from '../../lib/errors.js';
import { PROBE_TIMEOUT_MS, probeHealth } from './http-probe.js';

/** Consecutive failed /health probes after READY that make a shard UNHEALTHY. One miss is noise; three is a hang. */
export const UNHEALTHY_AFTER_FAILURES = 3;

/**
 * Probes `baseUrl`/health every `intervalMs` until `signal` aborts, and
 * tells `onChange` when the engine crosses UNHEALTHY_AFTER_FAILURES failures
 * in a row (`healthy: false`) or answers again after that (`healthy: true`).
 * A hung NCCL collective keeps the pid alive, so only a probe sees it.
 */
export function watchHealth(opts: {
  baseUrl: string;
  intervalMs: number;
  signal: AbortSignal;
  onChange: (healthy: boolean, why: string) => void;
}): void {
  const { baseUrl, intervalMs, signal } = opts;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  const probe = async () => {
    const result = await probeHealth(baseUrl, {
      // Never longer than an interval, so one hung probe cannot hide the next ones.
      timeoutMs: Math.min(PROBE_TIMEOUT_MS, Math.max(500, intervalMs)),
      signal,
    }).catch((err: unknown) => ({ ok: false as const, loading: false, reason: errorMessage(err) }));
    if (signal.aborted) return;
    if (result.ok) {
      if (failures >= UNHEALTHY_AFTER_FAILURES) opts.onChange(true, '/health answers again');
      failures = 0;
    } else if (++failures === UNHEALTHY_AFTER_FAILURES) {
      opts.onChange(false, `${failures} health probes failed in a row: ${result.reason}`);
    }
    if (signal.aborted) return;
    timer = setTimeout(probe, intervalMs);
    timer.unref();
  };
  timer = setTimeout(probe, intervalMs);
  timer.unref();
  signal.addEventListener('abort', () => clearTimeout(timer), { once: true });
}
