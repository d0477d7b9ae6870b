import { formatBytes } from '../lib/format-bytes.js';
import type { PullEvent } from './pull-model.js';

/** On a pipe or in a log, a progress line at most this often: a 140 GB shard is hours, and a log without a line for them looks hung. */
export const PLAIN_PROGRESS_EVERY_MS = 10_000;

/**
 * A pull's progress as a whole: bytes fetched of the bytes to fetch, the
 * rate since the first byte, and the time left at that rate (walkthrough 3:
 * per-file bytes only, no total, no rate, and nothing at all between
 * `fetching` and `verified` on a pipe). Fed the pull's events; the clock is
 * the caller's, so that a test can drive it.
 */
export class PullProgress {
  private total = 0;
  private readonly fileBytes = new Map<string, number>();
  private firstByteAtMs: number | undefined;
  private lastLineAtMs: number | undefined;

  constructor(private readonly nowMs: () => number = () => performance.now()) {}

  /** Takes one event of the pull. */
  observe(e: PullEvent): void {
    if (e.kind === 'plan') this.total = e.fetchBytes;
    else if (e.kind === 'file-progress') {
      this.firstByteAtMs ??= this.nowMs();
      this.fileBytes.set(e.path, e.bytes);
    } else if (e.kind === 'file-done') this.fileBytes.set(e.path, e.size);
  }

  /** Bytes on disk of the files being fetched (a resumed file counts what it started from). */
  get done(): number {
    let sum = 0;
    for (const b of this.fileBytes.values()) sum += b;
    return sum;
  }

  /** "1.2 GiB of 5 GiB (24%), 110 MiB/s, about 35 s left"; without a rate before the first byte. */
  line(): string {
    const done = this.done;
    const pct = this.total > 0 ? ` (${Math.min(100, Math.floor((100 * done) / this.total))}%)` : '';
    const head = `${formatBytes(done)} of ${formatBytes(this.total)}${pct}`;
    const elapsedS = this.firstByteAtMs === undefined ? 0 : (this.nowMs() - this.firstByteAtMs) / 1000;
    if (elapsedS <= 0 || done <= 0) return head;
    const rate = done / elapsedS;
    const leftS = Math.max(0, (this.total - done) / rate);
    return `${head}, ${formatBytes(rate)}/s, about ${formatDuration(leftS)} left`;
  }

  /** The line for a pipe when one is due (every PLAIN_PROGRESS_EVERY_MS after the first byte), else undefined. */
  plainLineDue(): string | undefined {
    if (this.firstByteAtMs === undefined) return undefined;
    const now = this.nowMs();
    if (now - (this.lastLineAtMs ?? this.firstByteAtMs) < PLAIN_PROGRESS_EVERY_MS) return undefined;
    this.lastLineAtMs = now;
    return `progress: ${this.line()}`;
  }
}

function formatDuration(s: number): string {
  if (s < 90) return `${Math.ceil(s)} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
