import { readGauge, sumOver } from './read-gauge.js';

/**
 * The value of a counter in Prometheus text exposition, summed over its label
 * sets (SGLang splits its token counters by `is_streaming` and `mode`, vLLM
 * by engine and finished reason), or undefined when it is absent. `name` may
 * be the counter's own name or its exposed sample name: prometheus_client
 * exposes counter `x` as `x_total` (and `x_created`, which is a timestamp,
 * never the count).
 */
export function readCounter(text: string, name: string): number | undefined {
  if (name.endsWith('_total')) return readGauge(text, name);
  return readGauge(text, `${name}_total`) ?? readGauge(text, name);
}

/**
 * The sum of several counters, for progress: any change of it is work done.
 * Undefined when the engine exports none of them (vLLM with
 * --disable-log-stats, SGLang without --enable-metrics).
 */
export function readCounters(text: string, names: readonly string[]): number | undefined {
  return sumOver(names, (name) => readCounter(text, name));
}
