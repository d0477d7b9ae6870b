import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { isNotFound } from '../../lib/errno.js';
import { isValidShardId } from '../../lib/shard-id.js';
import { modelPins, pinModel, unpinModel } from '../../models/model-pins.js';
import { repoFromFolderName, repoIdProblem } from '../../models/repo-id.js';
import type { StoreLayout } from '../../models/store-layout.js';

/** The hub model a shard loads, or undefined for a local path or anything that is not a hub id (never in the store). */
export function shardHubModel(spec: Pick<StartShard, 'profile'>): string | undefined {
  const model = spec.profile?.model ?? '';
  return repoIdProblem(model) === undefined ? model : undefined;
}

/**
 * The agent's side of the store's pins (model-pins.ts): a shard's model is
 * pinned before its engine launches, so eviction never takes weights a
 * loading or serving engine reads, and unpinned when the shard is removed.
 * A pin outlives an agent crash on purpose; reconcile() at the next start
 * removes those of shards the agent no longer has, so a crash never keeps a
 * model for ever. A shard's pins and unpins run one after another, in the
 * order asked: the unpin of a run that ended must never land after the pin
 * of the next run of the same shard id.
 */
export class ShardModelPins {
  /** Shard id → the model it pinned, for the unpin. */
  private readonly held = new Map<string, string>();
  /** Shard id → its last pin or unpin, which the next one waits for. */
  private readonly queue = new Map<string, Promise<void>>();

  constructor(private readonly layout: StoreLayout) {}

  /** Pins the shard's model; nothing for a model that is not a hub id. */
  pin(spec: Pick<StartShard, 'shardId' | 'profile'>): Promise<void> {
    const repo = shardHubModel(spec);
    if (repo === undefined) return Promise.resolve();
    return this.inTurn(spec.shardId, async () => {
      const before = this.held.get(spec.shardId);
      if (before !== undefined && before !== repo) await unpinModel(this.layout, before, spec.shardId);
      await pinModel(this.layout, repo, spec.shardId);
      this.held.set(spec.shardId, repo);
    });
  }

  /** Lets go of what the shard pinned; nothing when it pinned nothing. */
  unpin(shardId: string): Promise<void> {
    return this.inTurn(shardId, async () => {
      const repo = this.held.get(shardId);
      if (repo === undefined) return;
      this.held.delete(shardId);
      await unpinModel(this.layout, repo, shardId);
    });
  }

  private inTurn(shardId: string, step: () => Promise<void>): Promise<void> {
    const run = (this.queue.get(shardId) ?? Promise.resolve()).then(step, step);
    const settled = run.catch(() => {});
    this.queue.set(shardId, settled);
    void settled.then(() => {
      if (this.queue.get(shardId) === settled) this.queue.delete(shardId);
    });
    return run;
  }

  /**
   * Makes the pins on disk those of `shards` (the shards the agent has after
   * recovering engines): each one's model pinned, and every pin whose holder
   * is not among them removed (the folder stays: its mtime is the model's last use). Returns the
   * removed pins as `repo/holder`, for the log.
   */
  async reconcile(shards: readonly Pick<StartShard, 'shardId' | 'profile'>[]): Promise<string[]> {
    for (const s of shards) await this.pin(s);
    const live = new Set(shards.map((s) => s.shardId));
    const removed: string[] = [];
    const root = join(this.layout.ownDir, 'pins');
    for (const folder of await entries(root)) {
      const repo = repoFromFolderName(folder);
      if (repo === undefined) continue;
      for (const holder of await modelPins(this.layout, repo)) {
        if (live.has(holder)) continue;
        if (!isValidShardId(holder)) continue;
        await unpinModel(this.layout, repo, holder);
        removed.push(`${repo}/${holder}`);
      }
    }
    return removed;
  }
}

async function entries(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
}
