/**
 * The Prometheus series an engine exports that the supervisor reads, by the
 * names the engine exposes on /metrics (counters with their `_total`).
 * Stall detection needs both: requests running with a flat token counter is
 * an engine that answers /health while generating nothing.
 */
export interface EngineMetrics {
  /** Gauge: requests the engine is working on now. */
  readonly requestsRunning: string;
  /** Counter: generation tokens produced since the engine started. */
  readonly generationTokens: string;
}
