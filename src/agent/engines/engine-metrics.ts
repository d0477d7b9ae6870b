import type { EngineWatch } from '../../lib/engine-watch.js';

/**
 * The Prometheus series of an engine that the supervisor reads, by the
 * names the engine exposes on /metrics (counters with their `_total`): the
 * part of an EngineWatch that is the same for every shard of the engine.
 */
export type EngineMetrics = Pick<EngineWatch, 'runningGauges' | 'inFlightGauges' | 'progressCounters'>;
