import { durationMs } from '@bufbuild/protobuf/wkt';
import type { ModelPull, PrefetchModel, StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { deadlineSignal } from '../../lib/deadline.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { type ModelStore, modelStoreFromConfig } from '../../models/model-store-options.js';
import { compileCacheBytes } from '../../models/compile-cache-bytes.js';
import { EngineCacheWatch } from '../../models/engine-cache-watch.js';
import { compileDirsByEngine } from '../engines/engine-catalog.js';
import { EngineCacheBound } from './engine-cache-bound.js';
import { scanStore } from '../../models/scan-store.js';
import type { ModelsConfig } from '../config/agent-config.js';
import { DEFAULT_STARTUP_TIMEOUT_MS } from '../supervisor/shard/shard-settle.js';
import { type CachedModelsView, NO_STORE, cachedModelsView } from './cached-models.js';
import { ModelPrefetch } from './model-prefetch.js';
import { pageCacheResidency } from '../../models/page-cache.js';
import { contentDigest, loaderComplete, loaderSnapshotAt } from '../../models/loader-snapshot.js';
import { verifyBlobsForStart } from '../../models/verified-blobs.js';
import { type RevisionView, revisionKey, revisionViews } from './revision-views.js';
import { revisionOf } from '../../models/judge-offline-start.js';
import { ShardModelPins, shardHubModel } from './shard-model-pins.js';
import { pullOutlastedStart, waitForModelPull } from './wait-for-model-pull.js';

export interface NodeModelsOptions {
  models: ModelsConfig;
  configPath: string;
  /** A ModelPull to the control plane. */
  send: (pull: ModelPull) => void;
  /** The store's models or free space changed: a new Inventory should go out. */
  onChange: () => void;
  /** How often the store is scanned again for what this agent did not do (`models pull` or `rm` in a shell): discovery.interval. */
  refreshIntervalMs: number;
  logger: Logger;
  /** Rates its pulls and warms measured (ModelPrefetchOptions.onRate). */
  onRate?: (kind: 'hub' | 'disk', bytes: number, ms: number) => void;
}

/** A start waiting for its model's pull: not yet in the registry, shown by `ctl status`. */
export interface WaitingStart {
  spec: Pick<StartShard, 'shardId' | 'replicaId' | 'profile' | 'gpuIndices' | 'httpPort' | 'rank' | 'nnodes' | 'gang' | 'leaderAddr' | 'leaderPort'>;
  model: string;
  sinceMs: number;
}

/** Thrown into a start waiting for its model's pull when a StopShard of it comes: the stop reports, the start says nothing. */
export class StartCancelledError extends Error {}

/**
 * The agent's use of the node's model store (issue 30): PrefetchModel,
 * the wait of a start whose model is being pulled, the pins of shards, and
 * what Inventory says of the store. Without models.cache_dir it holds no
 * store: prefetches are refused with the reason, starts neither wait nor pin.
 */
export class NodeModels {
  readonly store: ModelStore | undefined;
  private readonly prefetcher: ModelPrefetch;
  private readonly pins: ShardModelPins | undefined;
  private readonly life = new AbortController();
  /** Starts waiting for a pull, by shard id: a stop ends the wait. */
  private readonly waits = new Map<string, { stop: AbortController; start: WaitingStart; waiting: boolean }>();
  private view: CachedModelsView = NO_STORE;
  /** Each pulled revision as the loaders see it, at the last scan (revision-views.ts). */
  private revisions = new Map<string, RevisionView>();
  private viewKey = '';
  private refreshing: Promise<void> | undefined;
  private refreshAgain = false;
  /** Residency could not be read once (page-cache.ts): said in the log, not again. */
  private residencyUnknown = false;
  private timer: NodeJS.Timeout | undefined;
  /** The engines' caches, surveyed at each rescan (bounded, no link followed); reports read the last survey. */
  readonly engineCaches: EngineCacheWatch | undefined;
  private readonly engineCacheBound: EngineCacheBound;

  constructor(private readonly opts: NodeModelsOptions) {
    this.store = opts.models.cacheDir === '' ? undefined : modelStoreFromConfig(opts.models, opts.configPath);
    this.pins = this.store && new ShardModelPins(this.store.layout);
    const budget = this.store?.budget ?? 0;
    this.engineCacheBound = new EngineCacheBound(opts.logger);
    this.engineCaches = this.store && new EngineCacheWatch(this.store.layout, { onSurvey: (s) => this.engineCacheBound.judge(s, budget), compileDirs: compileDirsByEngine() });
    this.prefetcher = new ModelPrefetch({ store: this.store, send: opts.send, onStoreChanged: () => void this.refresh(), signal: this.life.signal, logger: opts.logger, onRate: opts.onRate });
  }

  /** Whether the last survey of the engines' caches saw a compile cache of `model` by `engine` (never waits, never reads a folder). */
  compiled(model: string, engine: string): boolean {
    return this.engineCaches?.compiled(model, engine) ?? false;
  }

  /** What Inventory carries: cached_models and model_cache_free_bytes, as last scanned. */
  current(): CachedModelsView {
    return this.view;
  }

  prefetch(m: PrefetchModel): Promise<void> {
    return this.prefetcher.prefetch(m);
  }

  /**
   * Before a start is reserved: waits while the shard's model is being
   * pulled, bounded by the shard's startup_timeout (a refusal naming the
   * pull when it runs out) and ended by a stop of the shard
   * (StartCancelledError).
   */
  async waitForPull(spec: WaitingStart['spec']): Promise<void> {
    const repo = shardHubModel(spec);
    if (!this.store || repo === undefined) return;
    const timeoutMs = spec.profile?.startupTimeout ? durationMs(spec.profile.startupTimeout) : DEFAULT_STARTUP_TIMEOUT_MS;
    const stop = new AbortController();
    const wait = { stop, start: { spec, model: repo, sinceMs: Date.now() }, waiting: false };
    this.waits.set(spec.shardId, wait);
    const deadline = deadlineSignal(timeoutMs, stop.signal, this.life.signal);
    const signal = deadline.signal;
    try {
      await waitForModelPull({
        layout: this.store.layout,
        repo,
        prefetching: this.prefetcher.inProgress(repo),
        signal,
        onWait: () => {
          wait.waiting = true;
          wait.start.sinceMs = Date.now();
          this.opts.logger.info({ shard: spec.shardId, replica: spec.replicaId, model: repo }, 'start waits for the pull of its model in progress');
        },
      });
    } catch (err) {
      if (stop.signal.aborted) throw new StartCancelledError(`shard ${spec.shardId} was stopped while waiting for the pull of ${repo}`);
      if (deadline.expired) throw pullOutlastedStart(repo, timeoutMs);
      throw err;
    } finally {
      deadline.clear();
      if (this.waits.get(spec.shardId) === wait) this.waits.delete(spec.shardId);
    }
  }

  /** A StopShard came: a start of that shard still waiting for its pull gives up. */
  cancelWait(shardId: string): void {
    this.waits.get(shardId)?.stop.abort();
  }

  /** Starts waiting for their model's pull now. */
  waitingStarts(): WaitingStart[] {
    return [...this.waits.values()].filter((w) => w.waiting).map((w) => w.start);
  }

  /**
   * Before the engine launches: its model is kept in the store until the
   * shard is removed, and how much of it is in the page cache is read now,
   * so that the start is timed from the rung it really starts from (issue 41).
   */
  async pin(spec: Pick<StartShard, 'shardId' | 'profile'>): Promise<void> {
    await this.pins?.pin(spec);
    const repo = shardHubModel(spec);
    const store = this.store;
    const revision = revisionOf(spec.profile?.args ?? []);
    const key = revisionKey(repo ?? '', revision);
    // Complete as the last scan saw it: its files from there too, the store not scanned again for one start.
    const view = this.revisions.get(key);
    if (!repo || !store || !view?.complete) return;
    const resident = (await this.residency([[key, view]])).get(key);
    if (resident === undefined) return;
    this.view = { ...this.view, cachedModels: this.view.cachedModels.map((c) => (c.repo === repo && c.revision === revision && c.complete ? { ...c, residentBytes: BigInt(resident) } : c)) };
  }

  /**
   * Before a start that reads its model from the store: every blob its
   * loader reads still holds what the pull verified (verified-blobs.ts: a
   * blob changed in place is hashed again, a mismatch throws naming the
   * file), and the model's content digest, its identity on the shard.
   * '' when the store does not hold the revision complete.
   */
  async verifyForStart(spec: Pick<StartShard, 'profile'>): Promise<string> {
    const repo = shardHubModel(spec);
    if (!repo || !this.store) return '';
    const revision = revisionOf(spec.profile?.args ?? []);
    const s = await loaderSnapshotAt(this.store.layout, repo, revision, 'any');
    if (!s || !loaderComplete(s)) return '';
    const { rehashed } = await verifyBlobsForStart(this.store.layout, repo, revision, s.present);
    if (rehashed.length > 0) this.opts.logger.info({ model: repo, revision, files: rehashed }, 'store blobs changed since their pull were verified again before the start');
    return contentDigest(s);
  }

  /** The content digest of `repo` at `revision` as the last scan saw it; '' when not complete (revision-views.ts). */
  contentDigest(repo: string, revision: string): string {
    return this.revisions.get(revisionKey(repo, revision))?.digest ?? '';
  }

  /** The shard is removed (or its start refused): its model may be evicted again. Never throws. */
  async unpin(shardId: string): Promise<void> {
    try {
      await this.pins?.unpin(shardId);
    } catch (err) {
      this.opts.logger.warn({ shard: shardId, err: errorMessage(err) }, 'could not unpin the shard\'s model; the next agent start removes the pin');
    }
    void this.refresh();
  }

  /**
   * At agent start, once engines are recovered: the pins become those of the
   * shards the agent has, so a pin a crash left never keeps a model for
   * ever; then the first scan for Inventory.
   */
  async reconcile(shards: readonly Pick<StartShard, 'shardId' | 'profile'>[]): Promise<void> {
    if (this.pins) {
      try {
        const removed = await this.pins.reconcile(shards);
        if (removed.length > 0) this.opts.logger.info({ pins: removed }, 'removed the pins of shards this agent no longer has');
      } catch (err) {
        this.opts.logger.warn({ err: errorMessage(err) }, 'could not reconcile the model store\'s pins');
      }
    }
    await this.refresh();
    if (this.store && !this.life.signal.aborted) {
      this.timer ??= setInterval(() => void this.refresh(), this.opts.refreshIntervalMs);
      this.timer.unref();
    }
  }

  /** Scans the store again; onChange when what Inventory says of it changed. Scans run one at a time. */
  refresh(): Promise<void> {
    if (!this.store) return Promise.resolve();
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    const store = this.store;
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        try {
          const models = await scanStore(store.layout);
          const revisions = await revisionViews(store.layout, models);
          this.revisions = revisions;
          const compileBytes = await compileCacheBytes(store.layout, store.budget, await (this.engineCaches as EngineCacheWatch).refresh());
          const view = cachedModelsView(models, store.budget, compileBytes, await this.residency([...revisions].filter(([, v]) => v.complete)), revisions);
          const key = JSON.stringify(view, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
          this.view = view;
          if (key !== this.viewKey) {
            this.viewKey = key;
            this.opts.onChange();
          }
        } catch (err) {
          this.opts.logger.warn({ err: errorMessage(err) }, 'could not scan the model store');
        }
      } while (this.refreshAgain);
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  /**
   * Bytes of each complete revision in the page cache (mincore), counted
   * over the files the loaders read at that revision (revision-views.ts;
   * review engine-fidelity-3 E11: a repo shipping .bin twins never reached
   * the rung), in whole percents of them so that a page or two coming and
   * going does not make a new Inventory; none when it cannot be read (said once).
   */
  private async residency(revisions: readonly (readonly [string, RevisionView])[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const [key, v] of revisions.filter(([, x]) => x.loadBytes > 0)) {
      try {
        const r = await pageCacheResidency(v.blobPaths, this.life.signal);
        // Whole bytes (Inventory's uint64): the whole percent's share of the files, rounded down.
        const percent = Math.min(100, Math.floor((r.residentBytes / v.loadBytes) * 100));
        out.set(key, Math.floor((percent * v.loadBytes) / 100));
      } catch (err) {
        if (!this.residencyUnknown) this.opts.logger.warn({ err: errorMessage(err) }, 'page-cache residency of the store cannot be read; no model is called warm in memory');
        this.residencyUnknown = true;
        return out;
      }
    }
    return out;
  }

  /** Ends pulls in progress (their partial files stay, resumed by the next pull) and the rescans. */
  close(): void {
    this.life.abort();
    clearInterval(this.timer);
  }
}
