import { readGauge } from './read-gauge.js';

/**
 * The value of a counter in Prometheus text exposition, summed over its label
 * sets (SGLang splits its token counters by `is_streaming`, vLLM by engine),
 * or undefined when it is absent. `name` may be the counter's own name or its
 * exposed sample name: prometheus_client exposes counter `x` as `x_total`
 * (and `x_created`, which is a timestamp, never the count).
 */
export function readCounter(text: string, name: string): number | undefined {
  if (name.endsWith('_total')) return readGauge(text, name);
  return readGauge(text, `${name}_total`) ?? readGauge(text, name);
}
