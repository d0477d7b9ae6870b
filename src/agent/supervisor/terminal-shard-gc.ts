import type { SupervisorConfig } from '../config/agent-config.js';
import type { Logger } from '../../lib/logger.js';
import type { ShardId } from '../../lib/shard-id.js';
import { isTerminal, stateName } from '../../lib/shard-states.js';
import type { ShardRunner } from './shard/shard-runner.js';

/** supervisor.keep_terminal_shards's default: enough to look at a crash loop's last runs, as Nomad's gc_max_allocs bounds dead allocations. */
export const DEFAULT_KEEP_TERMINAL_SHARDS = 16;
/** supervisor.terminal_retention's default: an hour for an operator to see what ended. */
export const DEFAULT_TERMINAL_RETENTION_MS = 3_600_000;
/** How often the retention is checked between terminal transitions. */
export const TERMINAL_GC_INTERVAL_MS = 30_000;

/** A terminal shard as the collection weighs it. */
export interface TerminalShard {
  shardId: string;
  /** When it became FAILED, EXITED or STOPPED. */
  endedAtMs: number;
  /** Its engine may still run: never collected, since its GPUs stay reserved by it. */
  running: boolean;
}

/**
 * The terminal shards to forget now: every one ended longer than
 * `retentionMs` ago, and beyond the newest `keep` the oldest, whichever
 * comes first (kubelet's dead-container GC, Nomad's gc_max_allocs). A shard
 * whose engine may still run is never chosen, though it counts toward
 * `keep`. retentionMs 0 means no age limit.
 */
export function terminalShardsToCollect(shards: readonly TerminalShard[], opts: { keep: number; retentionMs: number; nowMs: number }): string[] {
  const newestFirst = [...shards].sort((a, b) => b.endedAtMs - a.endedAtMs || (a.shardId < b.shardId ? 1 : -1));
  return newestFirst
    .filter((s, i) => !s.running && (i >= opts.keep || (opts.retentionMs > 0 && opts.nowMs - s.endedAtMs >= opts.retentionMs)))
    .map((s) => s.shardId);
}

export interface TerminalShardGcOptions {
  config: SupervisorConfig;
  log: Logger;
  /** The registry's shard table, read for its terminal shards. */
  runners: ReadonlyMap<string, ShardRunner>;
  /** A shard being started again: its old runner is never collected. */
  isClaimed: (shardId: string) => boolean;
  /** Forgets a terminal shard: its runner and state file (Supervisor.remove). */
  remove: (shardId: ShardId) => void;
  /** The supervisor closed: nothing is collected any more. */
  closed: AbortSignal;
  /** Default TERMINAL_GC_INTERVAL_MS (30 s). */
  intervalMs?: number;
}

/** The collection of a supervisor's terminal shards: when each ended, and the timer that forgets them by keep and retention. */
export class TerminalShardGc {
  /** When each terminal shard in the table ended: the collection's clock. */
  private readonly endedAtMs = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly o: TerminalShardGcOptions) {
    this.timer = setInterval(() => this.collect(), o.intervalMs ?? TERMINAL_GC_INTERVAL_MS);
    this.timer.unref();
  }

  /** A shard ended at `atMs` (a terminal transition, or kept as ended before this agent). */
  ended(shardId: string, atMs: number): void {
    this.endedAtMs.set(shardId, atMs);
  }

  /** A shard that is not (or no longer) terminal. */
  alive(shardId: string): void {
    this.endedAtMs.delete(shardId);
  }

  /** Supervisor.collectTerminalShards: forgets the shards terminalShardsToCollect chooses; returns their ids. */
  collect(nowMs = Date.now()): string[] {
    const { config, log, runners, isClaimed, closed } = this.o;
    if (closed.aborted) return [];
    const terminal = [...runners.values()]
      .filter((r) => isTerminal(r.currentState))
      .map((r) => ({ shardId: r.shardId, endedAtMs: this.endedAtMs.get(r.shardId) ?? nowMs, running: r.running || isClaimed(r.shardId) }));
    const ids = terminalShardsToCollect(terminal, {
      keep: config.keepTerminalShards ?? DEFAULT_KEEP_TERMINAL_SHARDS,
      retentionMs: config.terminalRetentionMs ?? DEFAULT_TERMINAL_RETENTION_MS,
      nowMs,
    });
    for (const id of ids) {
      const r = runners.get(id);
      if (!r) continue;
      this.o.remove(r.shardId);
      this.endedAtMs.delete(id);
      log.info({ shard: id, replica: r.replicaId, state: stateName(r.currentState) }, 'forgot a terminal shard (its log is kept)');
    }
    return ids;
  }

  close(): void {
    clearInterval(this.timer);
  }
}
