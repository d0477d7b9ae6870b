import type { Logger } from '../lib/logger.js';

/** What ordering a StopShard needs to know of a shard. */
export interface StopTarget {
  shardId: string;
  nodeId: string;
  replicaId: string;
  generation: number;
  rank: number;
  nnodes: number;
}

/** The agent's default supervisor.stop_grace: the time a rank 0 is given to drain when StopShard sets no grace. */
export const DEFAULT_AGENT_STOP_GRACE_MS = 30_000;

/**
 * How long the worker ranks of a multi-node replica wait for rank 0 to be
 * reported gone before they are stopped anyway: rank 0's stop grace (the
 * agent's default; StopShard sets none, and the contract does not carry a
 * node's own), plus 10 s for the SIGKILL, the cgroup to empty and the report
 * to arrive. A rank 0 not reported gone by then is on a node that cannot
 * answer (partitioned, agent hung); holding its workers longer only leaves
 * them holding GPUs with nothing to serve.
 */
export const DEFAULT_RANK_ZERO_STOP_WAIT_MS = DEFAULT_AGENT_STOP_GRACE_MS + 10_000;

interface HeldGroup<S> {
  rankZero: string;
  workers: S[];
  timer: NodeJS.Timeout;
}

/**
 * Sends the StopShards of multi-node replicas rank 0 first, and those of
 * the worker ranks only once rank 0 is gone (reported STOPPED, FAILED or
 * EXITED, or its node gone) or after `rankZeroWaitMs`. vLLM's TP/PP headless
 * ranks do not drain: a SIGTERM raises SystemExit at once
 * (V:vllm/entrypoints/cli/serve.py:198-223), because that path only runs the
 * worker monitor and returns, with no drain and no wait (serve.py:208-223);
 * SGLang's worker ranks are alike. A worker stopped while rank 0 drains
 * breaks rank 0's collectives and fails the requests the drain was for
 * (engine-fidelity review §0 #7). A node agent sees one rank only, so only
 * the control plane can order this. Single-node shards are sent at once.
 */
export class RankOrderedStops<S extends StopTarget> {
  readonly #rankZeroWaitMs: number;
  /** Sends one StopShard; false when the node is not connected. */
  readonly #send: (s: S) => boolean;
  readonly #log: Logger;
  /** Replica generation (groupKey) → its rank 0 being stopped and the worker ranks held behind it. */
  readonly #groups = new Map<string, HeldGroup<S>>();
  #disposed = false;

  constructor(opts: { rankZeroWaitMs: number; send: (s: S) => boolean; log: Logger }) {
    this.#rankZeroWaitMs = opts.rankZeroWaitMs;
    this.#send = opts.send;
    this.#log = opts.log;
  }

  /**
   * Stops these shards: each multi-node rank 0 at once, each worker rank at
   * once unless its rank 0 is among them or already being stopped here, in
   * which case it is held until that rank 0 is gone.
   */
  stop(shards: readonly S[]): void {
    const rankZeros = shards.filter((s) => s.rank === 0);
    for (const s of rankZeros) this.#stopRankZero(s);
    for (const s of shards) {
      if (s.rank === 0 || this.isHeld(s.shardId)) continue;
      const group = this.#groups.get(groupKey(s));
      if (group) group.workers.push(s);
      else this.#send(s);
    }
  }

  /** True while s's StopShard is held behind its rank 0: it has not been sent. */
  isHeld(shardId: string): boolean {
    for (const g of this.#groups.values()) if (g.workers.some((w) => w.shardId === shardId)) return true;
    return false;
  }

  /**
   * The shard is gone (reported STOPPED, FAILED or EXITED, or its node is
   * gone): a rank 0's held workers are sent their stops now, and a held
   * worker is not sent one.
   */
  gone(shardId: string): void {
    for (const [key, g] of this.#groups) {
      if (g.rankZero === shardId) {
        this.#release(key, g);
        return;
      }
      g.workers = g.workers.filter((w) => w.shardId !== shardId);
    }
  }

  /** Sends every held stop now: for an end that cannot wait any longer (stop-all's timeout). */
  releaseAll(): void {
    for (const [key, g] of this.#groups) this.#release(key, g);
  }

  /**
   * Drops every held stop without sending it and clears the timers (the
   * owner is being disposed); stops after this are sent at once, since
   * nothing would release a held one.
   */
  dispose(): void {
    this.#disposed = true;
    for (const g of this.#groups.values()) clearTimeout(g.timer);
    this.#groups.clear();
  }

  #stopRankZero(s: S): void {
    const key = groupKey(s);
    const sent = this.#send(s);
    // Single-node, or a rank 0 that cannot be told (its node is away): there
    // is no drain to wait for, so its workers are not held.
    if (s.nnodes <= 1 || !sent || this.#disposed || this.#groups.has(key)) return;
    const timer = setTimeout(() => {
      const g = this.#groups.get(key);
      if (!g) return;
      if (g.workers.length > 0) {
        this.#log.warn(
          { shard: s.shardId, replica: s.replicaId, node: s.nodeId, waitedMs: this.#rankZeroWaitMs, workers: g.workers.map((w) => w.shardId) },
          'rank 0 not reported stopped in time; stopping the worker ranks now',
        );
      }
      this.#release(key, g);
    }, this.#rankZeroWaitMs);
    this.#groups.set(key, { rankZero: s.shardId, workers: [], timer });
  }

  #release(key: string, g: HeldGroup<S>): void {
    clearTimeout(g.timer);
    this.#groups.delete(key);
    for (const w of g.workers) this.#send(w);
  }
}

function groupKey(s: StopTarget): string {
  return `${s.replicaId}\u0000${s.generation}`;
}
