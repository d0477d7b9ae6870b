import type { Logger } from 'pino';

export interface RateLimitedLogOptions {
  /** At most one record per message per this many milliseconds; default DEFAULT_RATE_LIMIT_INTERVAL_MS. */
  intervalMs?: number;
  /** Clock, for tests. */
  nowMs?: () => number;
}

/** One line per message per 10 s: a human reads that, and a flood of 400k refusals cannot write 167 MB of log. */
export const DEFAULT_RATE_LIMIT_INTERVAL_MS = 10_000;

/** Distinct messages remembered; past it the oldest is forgotten, so hostile message text cannot grow this map. */
const MAX_TRACKED_MESSAGES = 256;

type Level = 'warn' | 'info' | 'error' | 'debug';

/**
 * A logger for per-message warnings (a refused control message, a refused
 * connection) that a flood would otherwise turn into an unbounded agent log
 * (review finding 6: 400k refusals, 167 MB). The first record of a message
 * is written at once; repeats within the interval are counted, and the next
 * record written says how many were left out (`suppressed`), so nothing is
 * hidden, only summarised. Keyed by the message, never by fields, which may
 * come from the wire.
 */
export class RateLimitedLog {
  readonly #log: Logger;
  readonly #intervalMs: number;
  readonly #now: () => number;
  readonly #last = new Map<string, { atMs: number; suppressed: number }>();

  constructor(log: Logger, opts: RateLimitedLogOptions = {}) {
    this.#log = log;
    this.#intervalMs = opts.intervalMs ?? DEFAULT_RATE_LIMIT_INTERVAL_MS;
    this.#now = opts.nowMs ?? Date.now;
  }

  warn(fields: Record<string, unknown>, msg: string): boolean {
    return this.#write('warn', fields, msg);
  }

  info(fields: Record<string, unknown>, msg: string): boolean {
    return this.#write('info', fields, msg);
  }

  error(fields: Record<string, unknown>, msg: string): boolean {
    return this.#write('error', fields, msg);
  }

  debug(fields: Record<string, unknown>, msg: string): boolean {
    return this.#write('debug', fields, msg);
  }

  /** Writes the record, or counts it; true when it was written. */
  #write(level: Level, fields: Record<string, unknown>, msg: string): boolean {
    const now = this.#now();
    const seen = this.#last.get(msg);
    if (seen && now - seen.atMs < this.#intervalMs) {
      seen.suppressed += 1;
      return false;
    }
    const suppressed = seen?.suppressed ?? 0;
    this.#last.delete(msg);
    this.#last.set(msg, { atMs: now, suppressed: 0 });
    if (this.#last.size > MAX_TRACKED_MESSAGES) {
      const oldest = this.#last.keys().next().value as string;
      this.#last.delete(oldest);
    }
    this.#log[level](suppressed > 0 ? { ...fields, suppressed } : fields, msg);
    return true;
  }
}
