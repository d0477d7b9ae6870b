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
