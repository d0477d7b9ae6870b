/** The longest wait between two attempts of a crash-looping replica, as kubelet's CrashLoopBackOff caps at 5 min. */
export const DEFAULT_MAX_RETRY_BACKOFF_MS = 5 * 60_000;
/** A replica READY this long has stopped crash-looping: its next failure waits the first backoff again (kubelet: 10 min; Nomad: its restart interval). */
export const DEFAULT_STABLE_READY_MS = 5 * 60_000;
/** From this many failures in a row a replica is said to be crash-looping (dev up's watch-replicas counts the same). */
export const CRASH_LOOP_FAILURES = 3;

/**
 * The wait before attempt `failures + 1` of a replica that has failed
 * `failures` times in a row: `baseMs` after the first, doubling after each
 * further one, at most `maxMs`. 5 s base: 5, 10, 20, 40, 80, 160, 300, 300 s.
 */
export function crashLoopDelayMs(failures: number, opts: { baseMs: number; maxMs: number }): number {
  if (failures <= 0 || opts.baseMs <= 0) return 0;
  // 2^30 already passes any sane max: no overflow to Infinity.
  const doubled = opts.baseMs * 2 ** Math.min(failures - 1, 30);
  return Math.min(doubled, Math.max(opts.maxMs, opts.baseMs));
}

/**
 * Failures in a row after one more: counting starts again when the replica
 * was READY for `stableMs` before it failed (it had recovered; this is a new
 * trouble, not the same loop).
 */
export function failuresInARow(before: number, readyAtMs: number | undefined, nowMs: number, stableMs: number): number {
  const recovered = readyAtMs !== undefined && nowMs - readyAtMs >= stableMs;
  return (recovered ? 0 : before) + 1;
}
