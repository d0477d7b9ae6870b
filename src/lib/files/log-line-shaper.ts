import { LineClock, withTimestamp } from './log-line-time.js';

/** What `ctl logs --since` and `--timestamps` ask of a log's lines. */
export interface LogLineShape {
  /** Only lines written at or after this time. */
  sinceMs?: number;
  /** Each line with its time in front (withTimestamp). */
  timestamps: boolean;
}

/**
 * Applies --since and --timestamps to one log's batches of lines, in file
 * order (LineClock carries a line's time to the untimed ones after it).
 * A line whose time is unknown is judged for --since by `fileMtimeMs` (it
 * was written no later than that: a log last written before --since holds
 * nothing after it), and shown with "-" by --timestamps.
 */
export class LogLineShaper {
  private readonly clock = new LineClock();
  constructor(
    private readonly shape: LogLineShape,
    private readonly fileMtimeMs?: number,
  ) {}

  get isIdentity(): boolean {
    return this.shape.sinceMs === undefined && !this.shape.timestamps;
  }

  /** `seenAtMs`: when the agent read these lines as they were written (a follow); their time when they carry none. */
  apply(lines: readonly string[], seenAtMs?: number): string[] {
    if (this.isIdentity) return [...lines];
    const out: string[] = [];
    const { sinceMs, timestamps } = this.shape;
    for (const line of lines) {
      const at = this.clock.timeOf(line, seenAtMs);
      if (sinceMs !== undefined && (at ?? this.fileMtimeMs ?? Number.POSITIVE_INFINITY) < sinceMs) continue;
      out.push(timestamps ? withTimestamp(line, at) : line);
    }
    return out;
  }
}
