import { httpGet, PROBE_TIMEOUT_MS } from './http-probe.js';
import type { PortOwnerCheck } from './port-owner-check.js';

/** One sample line of a series: its labels (the text between the braces, parsed when asked) and value. */
interface Sample {
  labelText: string;
  value: number;
  parsed?: Map<string, string>;
}

/** A sample's labels by name; parsed once, and only for the series that need them (matchers, several label sets). */
function labelsOf(s: Sample): Map<string, string> {
  if (s.parsed) return s.parsed;
  const labels = new Map<string, string>();
  for (const m of s.labelText.matchAll(LABEL)) labels.set(m[1] as string, m[2] as string);
  s.parsed = labels;
  return labels;
}

const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/**
 * The samples of `series`: a metric name, or a name with label matchers,
 * `name{mode="decode"}`, which keeps only the label sets that carry each of
 * them (SGLang's decode tokens alone out of realtime_tokens_total).
 */
function samplesOf(text: string, series: string): Sample[] {
  const brace = series.indexOf('{');
  const name = brace === -1 ? series : series.slice(0, brace);
  const wanted = brace === -1 ? [] : [...series.slice(brace + 1, series.lastIndexOf('}')).matchAll(LABEL)].map((m) => [m[1] as string, m[2] as string] as const);
  const out: Sample[] = [];
  // Only the lines that start with the name, found with indexOf: splitting
  // the whole text for each series read (seven a health tick, of a vLLM
  // /metrics of hundreds of KiB) was a fifth of an idle agent's allocation
  // (bench 5b). A comment line starts with '#', never with a name.
  if (name === '') return out;
  for (let at = text.indexOf(name); at !== -1; at = text.indexOf(name, at + 1)) {
    if (at > 0 && text.charCodeAt(at - 1) !== 10) continue;
    const end = text.indexOf('\n', at);
    const after = text.slice(at + name.length, end === -1 ? text.length : end);
    // Exactly this metric: "name{…} v" or "name v", not "name_total …".
    if (!(after.startsWith('{') || after.startsWith(' '))) continue;
    const close = after.startsWith('{') ? after.lastIndexOf('}') : -1;
    const value = Number((close === -1 ? after : after.slice(close + 1)).trim().split(/\s+/)[0]);
    if (!Number.isFinite(value)) continue;
    const sample: Sample = { labelText: close === -1 ? '' : after.slice(1, close), value };
    if (wanted.length > 0) {
      const labels = labelsOf(sample);
      if (wanted.some(([k, v]) => labels.get(k) !== v)) continue;
    }
    out.push(sample);
  }
  return out;
}

/**
 * The value of a gauge in Prometheus text exposition, over its label sets;
 * undefined when it is absent. Label sets are added up (vLLM's one per
 * engine, SGLang's per DP rank), except where the engine writes one count
 * twice:
 *
 * - SGLang with --enable-priority-scheduling writes the total under
 *   `priority=""` and again one series per priority
 *   (S:python/sglang/srt/observability/metrics_collector.py:1131-1143 at
 *   v0.5.18): when the total is there, it alone is read;
 * - SGLang with PP > 1 has each pipeline stage's scheduler export the same
 *   batch under its own `pp_rank` (:1080-1108): the stages of one set of
 *   other labels count once, by their largest value.
 *
 * Summed blindly, `ctl drain` showed twice or PP times the requests in flight.
 */
export function readGauge(text: string, name: string): number | undefined {
  let samples = samplesOf(text, name);
  if (samples.length === 0) return undefined;
  // One label set (vLLM's one engine, SGLang's one DP rank): nothing can count twice.
  if (samples.length === 1) return (samples[0] as Sample).value;
  if (samples.some((s) => labelsOf(s).get('priority') === '')) samples = samples.filter((s) => (labelsOf(s).get('priority') ?? '') === '');
  const stages = new Map<string, number>();
  for (const s of samples) {
    const key = [...labelsOf(s)]
      .filter(([k]) => k !== 'pp_rank')
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    stages.set(key, Math.max(stages.get(key) ?? Number.NEGATIVE_INFINITY, s.value));
  }
  let sum = 0;
  for (const v of stages.values()) sum += v;
  return sum;
}

/** The sum of several series, each read by `read`; undefined when none of them is there. */
export function sumOver(names: readonly string[], read: (name: string) => number | undefined): number | undefined {
  let sum: number | undefined;
  for (const name of names) {
    const v = read(name);
    if (v !== undefined) sum = (sum ?? 0) + v;
  }
  return sum;
}

/** The sum of several gauges (running and waiting); undefined when the engine exports none of them. */
export function readGauges(text: string, names: readonly string[]): number | undefined {
  return sumOver(names, (name) => readGauge(text, name));
}

/**
 * The value of a counter in Prometheus text exposition, summed over its label
 * sets (SGLang splits its token counters by `is_streaming` and `mode`, vLLM
 * by engine and finished reason), or undefined when it is absent. `name` may
 * be the counter's own name or its exposed sample name: prometheus_client
 * exposes counter `x` as `x_total` (and `x_created`, which is a timestamp,
 * never the count). Label matchers after the name (`x{mode="decode"}`) sum
 * only the label sets that carry them.
 */
export function readCounter(text: string, name: string): number | undefined {
  const brace = name.indexOf('{');
  const bare = brace === -1 ? name : name.slice(0, brace);
  const matchers = brace === -1 ? '' : name.slice(brace);
  if (bare.endsWith('_total')) return readGauge(text, name);
  return readGauge(text, `${bare}_total${matchers}`) ?? readGauge(text, name);
}

/**
 * The sum of several counters, for progress: any change of it is work done.
 * Undefined when the engine exports none of them (vLLM with
 * --disable-log-stats, SGLang without --enable-metrics).
 */
export function readCounters(text: string, names: readonly string[]): number | undefined {
  return sumOver(names, (name) => readCounter(text, name));
}

/**
 * Requests the engine at `baseUrl` holds, running and waiting, from its own
 * gauges `metrics` (summed); undefined when it cannot tell. A port held by
 * another process (`portOwner`) cannot tell: a squatter's "0 in flight"
 * would end a drain while the engine still serves.
 */
export async function readInFlight(baseUrl: string, metrics: readonly string[], signal: AbortSignal, portOwner?: PortOwnerCheck): Promise<number | undefined> {
  if (metrics.length === 0) return undefined;
  try {
    const owner = await portOwner?.();
    if (owner && owner.owner !== 'engine' && owner.owner !== 'unknown') return undefined;
    const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal });
    return r.status === 200 ? readGauges(r.body, metrics) : undefined;
  } catch {
    return undefined;
  }
}
