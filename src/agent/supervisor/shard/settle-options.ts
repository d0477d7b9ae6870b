/** A profile without startup_timeout gets this long to load (large models take minutes). */
export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

export interface SettleOptions {
  /** How long an HTTP rank may take to serve its model; default DEFAULT_STARTUP_TIMEOUT_MS (10 min). */
  timeoutMs?: number;
  /** How long a worker rank must stay alive; default config.workerSettleMs. */
  settleMs?: number;
  signal?: AbortSignal;
}
