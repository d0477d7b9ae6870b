/**
 * The delay before reconnect attempt `attempt` (1-based): exponential from
 * base to max, then a uniformly random point in [0, that) ("full jitter").
 * The jitter is there so that a fleet does not reconnect in lockstep after a
 * control-plane restart and knock it over again. It spans the whole window,
 * not only its upper half: a restart that outlasts reconnect_base sends
 * every agent of the fleet through this backoff at once, and with the delay
 * drawn from the upper half only (as it once was), the bench's 50 agents put
 * 13 Registers into one 100 ms. An agent then retries twice as often on a
 * long outage, each a refused connect that costs nothing. `random`
 * returning 1 gives the whole delay: that is jitter off.
 */
export function reconnectDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const full = Math.min(baseMs * 2 ** exponent, maxMs);
  return Math.round(random() * full);
}

/**
 * The delay before reconnecting after the control plane closed the stream on
 * purpose: a uniformly random point in [0, baseMs). A control-plane restart
 * closes every agent's stream at the same instant; coming straight back, a
 * thousand nodes are a thousand TLS handshakes and Registers in the same
 * millisecond against a process that has just started. Spread over
 * reconnect_base (1 s by default) they cost each agent half a second on
 * average, well inside what a restart costs anyway. `random` returning 0
 * gives no delay: that is jitter off.
 */
export function cleanCloseDelayMs(baseMs: number, random: () => number = Math.random): number {
  return Math.floor(random() * Math.max(baseMs, 0));
}

/**
 * Jitter is on unless LLMGW_INTERNAL_RECONNECT_JITTER=off. Internal and
 * undocumented on purpose: no operator has a reason to reconnect a fleet in
 * lockstep; the benchmark sets it to show the herd that jitter prevents.
 */
export const JITTER_ENV = 'LLMGW_INTERNAL_RECONNECT_JITTER';

/** The random source for the delays: Math.random, or a fixed one with jitter off (see JITTER_ENV). */
export function jitterSource(env: NodeJS.ProcessEnv = process.env): { backoff: () => number; cleanClose: () => number } {
  if (env[JITTER_ENV] === 'off') return { backoff: () => 1, cleanClose: () => 0 };
  return { backoff: Math.random, cleanClose: Math.random };
}
