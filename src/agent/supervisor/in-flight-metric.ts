/**
 * The gauge that counts requests an engine is working on, which a drain waits
 * to reach zero. Engines name it differently; the engine registry knows
 * which, and passes it to start().
 */
export const IN_FLIGHT_METRICS = {
  vllm: 'vllm:num_requests_running',
  sglang: 'sglang:num_running_reqs',
  sim: 'vllm:num_requests_running',
} as const;

/** Used when start() is given none: the sim and vLLM, which most profiles run. */
export const DEFAULT_IN_FLIGHT_METRIC = IN_FLIGHT_METRICS.vllm;

export function defaultInFlightMetric(engine: string): string {
  return (IN_FLIGHT_METRICS as Record<string, string>)[engine] ?? DEFAULT_IN_FLIGHT_METRIC;
}
