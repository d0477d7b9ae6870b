/*
 * A strict reader of the Prometheus text exposition format (0.0.4), as
 * Prometheus's own parser and `promtool check metrics` judge it, for tests
 * of what the agent serves: any line it does not understand, a sample
 * before its TYPE, a family split in two, a duplicate series, an invalid
 * name or label, or a histogram without its +Inf bucket, _sum and _count
 * throws, naming the line. promtool is not installed here; this is the
 * subset of its rules a hand-written exposition can break.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: MetricType;
  help: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set<MetricType>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/**
 * A sample value as Prometheus reads it: its text parser takes values with
 * Go's strconv.ParseFloat (model/textparse/promparse.go), which matches NaN,
 * Inf and Infinity ignoring case. prom-client's event-loop-lag gauges print
 * "Nan" before their first sample, which Prometheus takes.
 */
function parseValue(s: string, line: string): number {
  if (/^\+?inf(inity)?$/i.test(s)) return Number.POSITIVE_INFINITY;
  if (/^-inf(inity)?$/i.test(s)) return Number.NEGATIVE_INFINITY;
  if (/^nan$/i.test(s)) return Number.NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) throw new Error(`not a sample value ${JSON.stringify(s)}: ${line}`);
  return Number(s);
}

/** Labels between braces: name="value" pairs, values with \\, \" and \n escapes only. */
function parseLabels(text: string, line: string): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 0;
  for (;;) {
    while (text[i] === ' ') i++;
    if (text[i] === '}') return { labels, rest: text.slice(i + 1) };
    const eq = text.indexOf('=', i);
    if (eq === -1) throw new Error(`unterminated label set: ${line}`);
    const name = text.slice(i, eq).trim();
    if (!LABEL_NAME.test(name) || name.startsWith('__')) throw new Error(`invalid label name ${JSON.stringify(name)}: ${line}`);
    if (name in labels) throw new Error(`label ${name} twice: ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`label ${name} value is not quoted: ${line}`);
    let j = eq + 2;
    let value = '';
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] !== '\\') {
        value += text[j];
        continue;
      }
      const next = text[++j];
      if (next === 'n') value += '\n';
      else if (next === '\\' || next === '"') value += next;
      else throw new Error(`invalid escape \\${next} in label ${name}: ${line}`);
    }
    if (j >= text.length) throw new Error(`unterminated value of label ${name}: ${line}`);
    labels[name] = value;
    i = j + 1;
    while (text[i] === ' ') i++;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`expected , or } after label ${name}: ${line}`);
  }
}

/** The family a sample name belongs to, given the family last declared. */
function sampleBelongs(f: Family, name: string): boolean {
  if (name === f.name) return f.type !== 'histogram';
  if (f.type === 'histogram') return name === `${f.name}_bucket` || name === `${f.name}_sum` || name === `${f.name}_count`;
  if (f.type === 'summary') return name === `${f.name}_sum` || name === `${f.name}_count`;
  return false;
}

export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  let current: Family | undefined;
  const declare = (name: string, line: string): Family => {
    if (!METRIC_NAME.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}: ${line}`);
    let f = families.get(name);
    if (f && f !== current) throw new Error(`family ${name} is split: ${line}`);
    if (!f) {
      f = { name, type: 'untyped', help: '', samples: [] };
      families.set(name, f);
    }
    current = f;
    return f;
  };
  if (text !== '' && !text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) continue; // another comment
      const [, kind, name = '', arg = ''] = m;
      const f = declare(name, line);
      if (kind === 'HELP') f.help = arg;
      else {
        if (!TYPES.has(arg as MetricType)) throw new Error(`unknown type ${JSON.stringify(arg)}: ${line}`);
        if (f.samples.length > 0) throw new Error(`TYPE after samples of ${name}: ${line}`);
        f.type = arg as MetricType;
      }
      continue;
    }
    const nameEnd = line.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`not a sample: ${line}`);
    const name = line.slice(0, nameEnd);
    if (!METRIC_NAME.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}: ${line}`);
    let labels: Record<string, string> = {};
    let rest = line.slice(nameEnd);
    if (rest.startsWith('{')) ({ labels, rest } = parseLabels(rest.slice(1), line));
    const parts = rest.trim().split(' ');
    if (parts.length < 1 || parts.length > 2 || parts[0] === '') throw new Error(`expected a value and at most a timestamp: ${line}`);
    const value = parseValue(parts[0] as string, line);
    if (parts[1] !== undefined && !/^-?\d+$/.test(parts[1])) throw new Error(`invalid timestamp: ${line}`);
    if (!current || !sampleBelongs(current, name)) throw new Error(`sample of ${name} outside its family (TYPE first, families contiguous): ${line}`);
    const key = `${name}{${Object.entries(labels)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(',')}}`;
    if (seen.has(key)) throw new Error(`duplicate series ${key}`);
    seen.add(key);
    if (current.type === 'histogram' && name.endsWith('_bucket') && !('le' in labels)) throw new Error(`bucket without le: ${line}`);
    current.samples.push({ name, labels, value });
  }
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

/** Every label set of a histogram has a +Inf bucket equal to its _count, and a _sum. */
function checkHistogram(f: Family): void {
  const key = (l: Record<string, string>) => JSON.stringify(Object.entries(l).filter(([k]) => k !== 'le').sort());
  const counts = new Map(f.samples.filter((s) => s.name === `${f.name}_count`).map((s) => [key(s.labels), s.value]));
  const sums = new Set(f.samples.filter((s) => s.name === `${f.name}_sum`).map((s) => key(s.labels)));
  for (const s of f.samples) {
    if (s.name !== `${f.name}_bucket` || s.labels.le !== '+Inf') continue;
    const k = key(s.labels);
    if (counts.get(k) !== s.value || !sums.has(k)) throw new Error(`histogram ${f.name}${k}: +Inf bucket ${s.value}, _count ${counts.get(k)}, _sum ${sums.has(k) ? 'present' : 'missing'}`);
  }
}

/**
 * Prometheus naming rules a name can be checked against by itself
 * (prometheus.io/docs/practices/naming): counters end in _total, a unit is
 * a base unit (bytes, seconds) and comes before _total, _info series are 1.
 * Returns one line per breach.
 */
export function namingProblems(f: Family): string[] {
  const out: string[] = [];
  if (f.type === 'counter' && !f.name.endsWith('_total')) out.push(`${f.name}: a counter's name ends in _total`);
  if (f.type !== 'counter' && f.name.endsWith('_total')) out.push(`${f.name}: only counters end in _total`);
  const tokens = f.name.split('_');
  for (const bad of ['mb', 'mib', 'kb', 'kib', 'gb', 'ms', 'milliseconds', 'microseconds', 'minutes', 'hours', 'percent']) {
    if (tokens.includes(bad)) out.push(`${f.name}: ${bad} is not a base unit (bytes, seconds, ratios)`);
  }
  if (f.name.endsWith('_info') && (f.type !== 'gauge' || f.samples.some((s) => s.value !== 1))) out.push(`${f.name}: an _info series is a gauge of 1`);
  if (f.help === '') out.push(`${f.name}: no HELP`);
  return out;
}
