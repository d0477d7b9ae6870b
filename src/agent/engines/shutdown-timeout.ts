/**
 * How long a draining engine may take, derived from supervisor.stop_grace.
 *
 * vLLM drains in-flight requests on SIGTERM only when started with
 * --shutdown-timeout N (its default, 0, aborts them). N must end before the
 * supervisor's SIGKILL at stop_grace, with room left for vLLM to tear down
 * its engine core and workers after the drain; otherwise every stop that
 * reaches the timeout is a SIGKILL in the middle of freeing GPU memory.
 */

/** Room kept after the drain for the engine to exit: 5 s, or a fifth of the grace when that is less, never under 1 s. */
export function shutdownMarginMs(stopGraceMs: number): number {
  return Math.max(1000, Math.min(5000, Math.floor(stopGraceMs / 5)));
}

/** Whole seconds (vLLM takes an int) the engine may drain; 0 when the grace leaves no room. */
export function shutdownTimeoutS(stopGraceMs: number): number {
  return Math.max(0, Math.floor((stopGraceMs - shutdownMarginMs(stopGraceMs)) / 1000));
}
