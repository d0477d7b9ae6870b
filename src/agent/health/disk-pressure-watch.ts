import { EventEmitter } from 'node:events';
import { statfs } from 'node:fs/promises';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { type DiskPressureThresholds, type DiskPressureVerdict, type DiskReading, judgeDiskPressure } from './judge-disk-pressure.js';

export interface DiskPressureWatchOptions extends DiskPressureThresholds {
  /** The directories watched, by the config key that names them. */
  dirs: readonly { key: string; path: string }[];
  /** supervisor.disk_pressure.interval; 0 never reads (the condition never holds). */
  intervalMs: number;
  logger: Logger;
}

/** The condition as the agent reports it: whether it holds, why, and since when it holds or stopped holding. */
export interface DiskPressureState extends DiskPressureVerdict {
  /** When `active` last changed; undefined while it never held in this agent's life. */
  sinceMs: number | undefined;
}

/**
 * Free space and inodes of supervisor.log_dir and supervisor.state_dir, read
 * with statfs every interval: the node condition DiskPressure. A full log
 * disk once took down every engine of a node within 30 s with one ENOSPC
 * line as the only clue (issue 28); now the engines keep serving (their lost
 * log lines are theirs to drop), and this watch is what tells the operator,
 * the control plane and new starts. Emits 'change' when `active` flips,
 * logged once per flip; a reason that only changes its numbers is kept for
 * the next refusal but is not a change.
 */
export class DiskPressureWatch extends EventEmitter<{ change: [DiskPressureState] }> {
  private state: DiskPressureState = { active: false, reason: '', keys: [], sinceMs: undefined };
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Directories statfs failed on, so each failure is said once, not every interval. */
  private readonly unreadable = new Set<string>();

  constructor(private readonly opts: DiskPressureWatchOptions) {
    super();
  }

  current(): DiskPressureState {
    return this.state;
  }

  /** The first reading, awaited (a node full at boot says so in its first Register), then one per interval. */
  async start(): Promise<void> {
    if (this.opts.intervalMs <= 0) return;
    await this.check();
    this.schedule();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  /** One reading and judgement now; exposed for tests and for a caller that cannot wait an interval. */
  async check(): Promise<DiskPressureState> {
    const readings: DiskReading[] = [];
    for (const d of this.opts.dirs) {
      const r = await this.read(d.key, d.path);
      if (r) readings.push(r);
    }
    const verdict = judgeDiskPressure(readings, this.opts);
    const flipped = verdict.active !== this.state.active;
    this.state = { ...verdict, sinceMs: flipped ? Date.now() : this.state.sinceMs };
    if (flipped) {
      if (verdict.active) this.opts.logger.warn({ reason: verdict.reason }, 'disk pressure');
      else this.opts.logger.info('disk pressure cleared');
      this.emit('change', this.state);
    }
    return this.state;
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      void this.check()
        .catch((err: unknown) => this.opts.logger.warn({ err: errorMessage(err) }, 'disk pressure check failed'))
        .finally(() => this.schedule());
    }, this.opts.intervalMs);
    // A watch must not keep an agent that is shutting down alive.
    this.timer.unref();
  }

  /**
   * A directory that cannot be read (removed, not yet created) is not judged:
   * its absence is the supervisor's error to report when it writes there,
   * and calling it "disk pressure" would send the operator to free space.
   */
  private async read(key: string, path: string): Promise<DiskReading | undefined> {
    try {
      const s = await statfs(path);
      if (this.unreadable.delete(path)) this.opts.logger.info({ dir: path }, 'disk pressure watch reads the directory again');
      return { key, path, freeBytes: s.bavail * s.bsize, freeInodes: s.ffree, totalInodes: s.files };
    } catch (err) {
      if (!this.unreadable.has(path)) this.opts.logger.warn({ dir: path, err: errorMessage(err) }, 'disk pressure watch cannot read the directory');
      this.unreadable.add(path);
      return undefined;
    }
  }
}
