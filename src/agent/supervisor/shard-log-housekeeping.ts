import type { SupervisorConfig } from '../config/agent-config.js';
import { errorMessage } from '../../lib/errors.js';
import { pruneShardLogs, shardIdOfAnyLog } from '../../lib/files/prune-shard-logs.js';
import { LOG_CHECK_INTERVAL_MS, logMayNeedRotation, rotateLogIfNeeded } from '../../lib/files/rotate-log.js';
import type { Logger } from '../../lib/logger.js';
import { findRecordedShardIds } from '../../lib/process/judge-orphan.js';
import { type EngineUids, findProcessesLoggingUnder } from '../../lib/process/process-table.js';
import { previousRunsDir, shardLogDir } from '../../lib/shard-layout.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { ShardRunner } from './shard/shard-runner.js';

/** How often logs of shards no longer supervised are pruned: they only grow when shards come and go. */
export const LOG_PRUNE_INTERVAL_MS = 10 * 60_000;
/** supervisor.log_retention's default: a week of evidence for an operator to look at. */
export const DEFAULT_LOG_RETENTION_MS = 168 * 3_600_000;
/** supervisor.log_retention_bytes's default. */
export const DEFAULT_LOG_RETENTION_BYTES = 1024 ** 3;

export interface ShardLogHousekeepingOptions {
  config: SupervisorConfig;
  log: Logger;
  /** Only their processes count as a shard's log writers. */
  engineUids: EngineUids;
  /** The registry's shard table: whose logs are rotated, and kept. */
  runners: ReadonlyMap<string, ShardRunner>;
  /** A shard being launched, whose log is kept though it is not in the table yet. */
  isClaimed: (shardId: string) => boolean;
  /** Default LOG_CHECK_INTERVAL_MS (2 s). */
  logCheckIntervalMs?: number;
  /** Default LOG_PRUNE_INTERVAL_MS (10 min). */
  logPruneIntervalMs?: number;
}

/** The timers that keep shard logs in bounds: rotation by size, pruning of logs of shards no longer here. */
export class ShardLogHousekeeping {
  private readonly logTimer: NodeJS.Timeout;
  private readonly pruneTimer: NodeJS.Timeout;
  private logCheckRunning = false;

  constructor(private readonly opts: ShardLogHousekeepingOptions) {
    this.logTimer = setInterval(() => void this.checkLogs(), opts.logCheckIntervalMs ?? LOG_CHECK_INTERVAL_MS);
    this.logTimer.unref();
    this.pruneTimer = setInterval(() => {
      this.pruneLogs().catch((err: unknown) => opts.log.warn({ err: errorMessage(err) }, 'pruning old shard logs failed'));
    }, opts.logPruneIntervalMs ?? LOG_PRUNE_INTERVAL_MS);
    this.pruneTimer.unref();
  }

  private async checkLogs(): Promise<void> {
    // A slow disk must not stack rotations of one log on top of each other.
    if (this.logCheckRunning) return;
    this.logCheckRunning = true;
    try {
      const live = [...this.opts.runners.values()].filter((r) => !(isTerminal(r.currentState) && !r.running));
      // Every log's stat at once, the rotations (rare) one after the other:
      // stats in a row were a thread-pool round trip and a wake of the
      // agent's loop each, every 2 s for every shard (bench figures 5b and
      // 16); at once their answers come back together. A stat that fails
      // sends the log to rotateLogIfNeeded, which says why.
      const due = await Promise.all(live.map((r) => logMayNeedRotation(r.logPath, this.opts.config.logMaxBytes).catch(() => true)));
      for (const [i, r] of live.entries()) {
        if (!due[i]) continue;
        try {
          if (await rotateLogIfNeeded(r.logPath, this.opts.config.logMaxBytes)) {
            this.opts.log.info({ shard: r.shardId, replica: r.replicaId, pid: r.pid }, 'rotated shard log');
          }
        } catch (err) {
          this.opts.log.warn({ shard: r.shardId, err: errorMessage(err) }, 'rotating shard log failed');
        }
      }
    } finally {
      this.logCheckRunning = false;
    }
  }

  /**
   * Removes logs of shards no longer here, by supervisor.log_retention and
   * log_retention_bytes (pruneShardLogs). Kept: every shard in the table or
   * being launched, every shard a state file still records (an engine a
   * previous agent left, not yet recovered) and every log an engine writes.
   * Returns the file names removed.
   */
  async pruneLogs(): Promise<string[]> {
    const { config, runners, isClaimed } = this.opts;
    const dir = shardLogDir(config.logDir);
    const written = new Set<string>();
    for (const path of findProcessesLoggingUnder(dir, this.opts.engineUids).keys()) {
      const id = shardIdOfAnyLog(path.slice(dir.length + 1));
      if (id !== undefined) written.add(id);
    }
    const recorded = new Set<string>(findRecordedShardIds(config));
    const removed = await pruneShardLogs({
      dir,
      previousRunsDir: previousRunsDir(config.logDir),
      maxAgeMs: config.logRetentionMs ?? DEFAULT_LOG_RETENTION_MS,
      maxTotalBytes: config.logRetentionBytes ?? DEFAULT_LOG_RETENTION_BYTES,
      keep: (id) => runners.has(id) || isClaimed(id) || recorded.has(id) || written.has(id),
    });
    if (removed.length > 0) this.opts.log.info({ files: removed.length, first: removed[0] }, 'removed logs of shards no longer here');
    return removed;
  }

  close(): void {
    clearInterval(this.logTimer);
    clearInterval(this.pruneTimer);
  }
}
