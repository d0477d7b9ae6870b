/**
 * When a log line was written, as far as the line itself tells. Engines
 * write their logs themselves (the agent hands them the file), so the agent
 * never sees a line arrive; what it has is the time engines put at the
 * start of their lines:
 * - RFC 3339 / ISO 8601, optionally in brackets: `2026-12-02T02:31:28.123Z …`,
 *   SGLang's `[2026-12-02 02:31:28] …` (local time when no zone is given);
 * - vLLM's `INFO 12-02 02:31:28 [file.py:12] …` (local time, no year: the
 *   year that puts it at most a day ahead of `nowMs`);
 * - a JSON line's `time` (epoch ms, pino) or `timestamp` / `ts` (a string).
 * Anything else has no time of its own: see LineClock.
 */
export function lineTime(line: string, nowMs: number): number | undefined {
  const iso = ISO_AT_START.exec(line);
  if (iso) {
    const [, y, mo, d, h, mi, s, frac, zone] = iso;
    const ms = frac ? Number(`0.${frac}`) * 1000 : 0;
    if (zone) {
      const t = Date.parse(`${y}-${mo}-${d}T${h}:${mi}:${s}${zone === 'z' ? 'Z' : zone}`);
      return Number.isNaN(t) ? undefined : t + ms;
    }
    return new Date(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms).getTime();
  }
  const vllm = VLLM_AT_START.exec(line);
  if (vllm) {
    const [, mo, d, h, mi, s] = vllm;
    const year = new Date(nowMs).getFullYear();
    const at = (y: number) => new Date(y, Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)).getTime();
    // December's lines read in January belong to last year.
    return at(year) > nowMs + 86_400_000 ? at(year - 1) : at(year);
  }
  if (line.startsWith('{')) return jsonLineTime(line);
  return undefined;
}

const ISO_AT_START = /^\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|z|[+-]\d{2}:?\d{2})?/;
const VLLM_AT_START = /^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\b/;

function jsonLineTime(line: string): number | undefined {
  try {
    const o = JSON.parse(line) as Record<string, unknown>;
    if (typeof o.time === 'number' && o.time > 1e11) return o.time;
    for (const key of ['time', 'timestamp', 'ts']) {
      const v = o[key];
      if (typeof v === 'string') {
        const t = Date.parse(v);
        if (!Number.isNaN(t)) return t;
      }
    }
  } catch {
    // Not JSON after all.
  }
  return undefined;
}

/**
 * Times for a run of lines in file order: a line with no time of its own (a
 * traceback, a continuation) has the time of the last timed line before it,
 * or `fallbackMs` before any (the agent's own clock for a line it saw
 * arrive; undefined for a tail, where nothing better is known).
 */
export class LineClock {
  private last: number | undefined;
  constructor(private readonly nowMs: () => number = Date.now) {}

  timeOf(line: string, fallbackMs?: number): number | undefined {
    const t = lineTime(line, this.nowMs());
    if (t !== undefined) this.last = t;
    return t ?? this.last ?? fallbackMs;
  }
}

/** `--timestamps`: the line with its time in front, RFC 3339 in UTC; "-" when none is known. */
export function withTimestamp(line: string, atMs: number | undefined): string {
  return `${atMs === undefined ? '-' : new Date(atMs).toISOString()} ${line}`;
}
