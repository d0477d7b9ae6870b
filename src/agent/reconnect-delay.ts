/**
 * The delay before reconnect attempt `attempt` (1-based): exponential from
 * base to max, then a uniformly random point between half and the whole of
 * it. The jitter is there so that a fleet does not reconnect in lockstep after
 * a control-plane restart and knock it over again.
 */
export function reconnectDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const full = Math.min(baseMs * 2 ** exponent, maxMs);
  return Math.round(full / 2 + random() * (full / 2));
}
