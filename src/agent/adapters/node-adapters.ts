import { create } from '@bufbuild/protobuf';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type AdapterSpec, AdapterState, type AdapterStatus, AdapterStatusSchema, ShardState, type StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { isServing, isTerminal, isTrouble } from '../../lib/shard-states.js';
import type { ShardReaction } from '../supervisor/shard/shard-reaction.js';
import type { ShardSnapshot, ShardTransition } from '../supervisor/shard/shard-snapshot.js';
import type { AdapterConfigFeatures } from '../../models/adapters/adapter-files.js';
import { AdapterLedger } from './adapter-ledger.js';
import { type AdapterLimits, adapterLimitsProblem } from './adapter-limits.js';
import type { AdapterEngineCalls, AdapterStoreCalls, ResolvedAdapter } from './adapter-ports.js';
import { adapterSetProblem, MAX_ADAPTER_RANK, MAX_ADAPTERS } from './adapter-set-problem.js';
import { adapterStateDir, readDesiredAdapters, removeDesiredAdapters, writeDesiredAdapters } from './desired-adapters-file.js';
import { type StallWatchTarget, watchAfterUnload } from './post-unload-stall-watch.js';
import type { Proof } from './prove-adapter.js';
import { ShardAdapters } from './shard-adapters.js';

/** How often a serving shard's engine is listed against its set: an engine that restarted or evicted one is set back within about this (issue 53 asks 2 s). */
export const ADAPTER_RECHECK_MS = 1000;

/** What a shard's kind and spec say of its adapters, before any engine runs. */
export interface ShardAdapterFacts {
  engine: string;
  hasApi: boolean;
  limits: AdapterLimits;
  /** The names the shard serves under, which no adapter may take, and which its adapters' base must be. */
  modelNames: string[];
  /** What of an adapter's config the shard's engine refuses to load (EngineAdapters.refusesConfig). */
  refusesConfig?: (features: AdapterConfigFeatures) => string | undefined;
}

/** How one running shard's engine is reached for its adapters. */
export interface ShardAdapterAccess {
  engine: AdapterEngineCalls;
  prove: (name: string, adapter: ResolvedAdapter, signal: AbortSignal) => Promise<Proof>;
  /** Where its progress is read after an unload; none: not watched. */
  stall?: StallWatchTarget;
}

export interface NodeAdaptersOptions {
  stateDir: string;
  shards: { get(id: string): ShardSnapshot | undefined; react(r: ShardReaction): void };
  facts: (spec: StartShard) => ShardAdapterFacts;
  /** undefined: the shard's engine cannot be reached for adapters (no adapter API, no port). */
  access: (shard: ShardSnapshot) => ShardAdapterAccess | undefined;
  /** The node's store; none: every adapter is FAILED, saying so. */
  store?: AdapterStoreCalls;
  /** The shard's adapters changed: send its status. */
  report: (shardId: string) => void;
  log: Logger;
  recheckMs?: number;
}

export type SetAdaptersOutcome = { ok: true } | { refused: string };

const NO_STORE: AdapterStoreCalls = {
  resolve: async () => {
    throw new Error('this node has no model store: set models.cache_dir in the agent config to serve adapters');
  },
  pull: async () => {
    throw new Error('this node has no model store: set models.cache_dir in the agent config to serve adapters');
  },
  pin: async () => {},
  unpin: async () => {},
};

/**
 * The node's LoRA adapters (issue 53): one ShardAdapters per shard that has
 * any, made when first needed and reconciled at each READY, at every set
 * and every ADAPTER_RECHECK_MS; the set a SetAdapters gave kept beside the
 * shard's state (desired-adapters-file.ts) so that an agent restarted
 * under its engine reconciles to it alone; the names held across shards
 * (AdapterLedger); a stall after an unload reported on the shard.
 */
export class NodeAdapters {
  readonly #shards = new Map<string, { adapters: ShardAdapters; life: AbortController }>();
  readonly #stalls = new Map<string, AdapterStatus>();
  readonly #ledger: AdapterLedger;
  /** The recheck every ADAPTER_RECHECK_MS, running only while some shard has adapters (#recheckWhileAny). */
  #timer: NodeJS.Timeout | undefined;
  readonly #closed = new AbortController();

  constructor(private readonly opts: NodeAdaptersOptions) {
    try {
      mkdirSync(adapterStateDir(opts.stateDir), { recursive: true, mode: 0o700 });
    } catch (err) {
      opts.log.warn({ err: errorMessage(err) }, 'the adapter state folder could not be made; adapter names and answers are held in memory only');
    }
    this.#ledger = new AdapterLedger(join(adapterStateDir(opts.stateDir), 'ledger.json'));
    opts.shards.react({ name: 'adapters reconciled', on: (t) => this.onTransition(t) });
  }

  /**
   * Starts the recheck when the first shard has adapters and stops it when
   * the last is gone: with none, a timer a second woke the agent for nothing
   * on every node (bench figures 5b and 16).
   */
  #recheckWhileAny(): void {
    if (this.#shards.size > 0 && this.#timer === undefined && !this.#closed.signal.aborted) {
      this.#timer = setInterval(() => this.recheck(), this.opts.recheckMs ?? ADAPTER_RECHECK_MS);
      this.#timer.unref();
    } else if (this.#shards.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  /** Whether the recheck timer runs (tests: it runs only while some shard has adapters). */
  get rechecking(): boolean {
    return this.#timer !== undefined;
  }

  /** Why a StartShard's adapters or limits may not be, in one line; undefined when they may. Judged before anything is launched. */
  startProblem(spec: StartShard): string | undefined {
    const f = this.opts.facts(spec);
    if ((spec.maxAdapters > 0 || spec.maxAdapterRank > 0) && !f.hasApi) return adapterSetProblem([{ name: 'x' } as AdapterSpec], { reservedNames: [], limits: f.limits, engine: f.engine, hasAdapterApi: false });
    return adapterLimitsProblem(spec, { maxLoaded: MAX_ADAPTERS, maxRank: MAX_ADAPTER_RANK }) ?? adapterSetProblem(spec.adapters, { reservedNames: f.modelNames, limits: f.limits, engine: f.engine, hasAdapterApi: f.hasApi });
  }

  /**
   * A SetAdapters (or `ctl adapters`): the whole set judged first (a
   * refusal touches neither the engine nor the kept set), then kept, then
   * reconciled. Resolves once a pass that saw it has ended (at once for a
   * shard not serving yet: its READY reconciles).
   */
  async set(shardId: string, adapters: readonly AdapterSpec[]): Promise<SetAdaptersOutcome> {
    // After close(): the set would be kept on disk after the agent said it had done with its files.
    if (this.#closed.signal.aborted) return { refused: 'the agent is stopping; set the adapters again once it is back' };
    const shard = this.opts.shards.get(shardId);
    if (!shard || isTerminal(shard.state)) return { refused: `no running shard ${JSON.stringify(shardId)} on this node` };
    const f = this.opts.facts(shard.spec);
    const problem = adapterSetProblem(adapters, { reservedNames: f.modelNames, limits: f.limits, engine: f.engine, hasAdapterApi: f.hasApi });
    if (problem !== undefined) return { refused: problem };
    try {
      await writeDesiredAdapters(this.opts.stateDir, shardId, adapters);
    } catch (err) {
      // The set holds in memory; only an agent restart would go back to the last one kept.
      this.opts.log.warn({ shard: shardId, err: errorMessage(err) }, 'the desired adapters could not be kept; a restarted agent would reconcile to the set before');
    }
    const s = this.ensure(shard);
    if (!s) return { refused: `shard ${shardId}'s engine cannot be reached for its adapters` };
    this.#stalls.delete(shardId);
    if (!isServing(shard.state)) {
      s.want(adapters);
      this.opts.report(shardId);
      return { ok: true };
    }
    await s.set(adapters);
    return { ok: true };
  }

  /** Each adapter of the shard as ShardStatus.adapters says it (a stall after an unload included). */
  statuses(shardId: string): AdapterStatus[] {
    const list = this.#shards.get(shardId)?.adapters.statuses() ?? [];
    const stall = this.#stalls.get(shardId);
    // The stall is what is true of the adapter whose unload it followed, whatever its unload still waits for.
    return stall ? [...list.filter((a) => a.name !== stall.name), create(AdapterStatusSchema, { ...(list.find((a) => a.name === stall.name) ?? {}), ...stall })].sort((a, b) => a.name.localeCompare(b.name)) : list;
  }

  /** The shard's desired set: as last set, or kept, or its StartShard's. */
  desired(shard: ShardSnapshot): AdapterSpec[] {
    return this.#shards.get(shard.shardId)?.adapters.desired() ?? this.keptOrStarted(shard);
  }

  /** What adapters the shard was started with and how many it holds. */
  limits(shard: ShardSnapshot): AdapterLimits {
    return this.opts.facts(shard.spec).limits;
  }

  /** A stall seen after an unload, for ShardStatus.error; undefined when none. */
  stallOf(shardId: string): string | undefined {
    return this.#stalls.get(shardId)?.reason;
  }

  /** Every shard with adapters: name and state, for /metrics. */
  all(): { shardId: string; adapters: AdapterStatus[] }[] {
    return [...this.#shards.keys()].map((shardId) => ({ shardId, adapters: this.statuses(shardId) }));
  }

  /**
   * The agent going away: the recheck and every reconcile end, and no ledger
   * write starts after this. Resolves once the last one asked has ended, so
   * that the agent exiting (or a test removing the state dir) next never
   * cuts one off halfway.
   */
  close(): Promise<void> {
    this.#closed.abort();
    clearInterval(this.#timer);
    this.#timer = undefined;
    for (const s of this.#shards.values()) s.life.abort();
    return this.#ledger.close();
  }

  private keptOrStarted(shard: ShardSnapshot): AdapterSpec[] {
    // An adopted engine's set is the one kept beside its state; a fresh start's is its StartShard's.
    return (shard.adopted ? readDesiredAdapters(this.opts.stateDir, shard.shardId) : undefined) ?? [...shard.spec.adapters];
  }

  private ensure(shard: ShardSnapshot): ShardAdapters | undefined {
    const known = this.#shards.get(shard.shardId);
    if (known) return known.adapters;
    const access = this.opts.access(shard);
    if (!access) return undefined;
    const f = this.opts.facts(shard.spec);
    const life = new AbortController();
    const signal = AbortSignal.any([life.signal, this.#closed.signal]);
    const id = shard.shardId;
    const adapters = new ShardAdapters({
      shardId: id,
      engine: access.engine,
      store: this.opts.store ?? NO_STORE,
      ledger: this.#ledger,
      limits: f.limits,
      baseModels: f.modelNames,
      ...(f.refusesConfig ? { refusesConfig: f.refusesConfig } : {}),
      engineName: f.engine,
      prove: access.prove,
      onChange: () => this.opts.report(id),
      onUnload: (name) => void this.watchStall(id, name, access.stall, signal),
      log: this.opts.log,
      signal,
    });
    adapters.want(this.keptOrStarted(shard));
    this.#shards.set(id, { adapters, life });
    this.#recheckWhileAny();
    return adapters;
  }

  private async watchStall(shardId: string, name: string, target: StallWatchTarget | undefined, signal: AbortSignal): Promise<void> {
    if (!target) return;
    const reason = await watchAfterUnload(target, { signal });
    if (reason === undefined || signal.aborted) return;
    const why = `the engine ${reason} since adapter ${name}'s unload was asked (SGLang #36894's deadlock); restart the shard`;
    this.opts.log.error({ shard: shardId, adapter: name, err: why }, 'engine stalled after an adapter unload');
    this.#stalls.set(shardId, create(AdapterStatusSchema, { name, state: AdapterState.FAILED, reason: why, proven: false }));
    this.opts.report(shardId);
  }

  private onTransition(t: ShardTransition): void {
    const id = t.shard.shardId;
    if (isTerminal(t.to)) {
      const known = this.#shards.get(id);
      this.#shards.delete(id);
      this.#recheckWhileAny();
      this.#stalls.delete(id);
      known?.life.abort();
      for (const { repo } of known?.adapters.loadedRepos() ?? []) void this.opts.store?.unpin(repo, id).catch(() => {});
      void this.#ledger.releaseShard(id);
      removeDesiredAdapters(this.opts.stateDir, id);
      return;
    }
    if (t.to !== ShardState.READY) return;
    // An engine started without LoRA has nothing to reconcile, unless a set was given since.
    if (!this.#shards.has(id) && this.opts.facts(t.shard.spec).limits.maxLoaded === 0) return;
    const s = this.ensure(t.shard);
    if (!s) return;
    // Back to READY (a wake, a recovery, an adoption settled): each adapter is listed and proven again.
    s.unprove();
    void s.reconcile().catch((err) => this.opts.log.warn({ shard: id, err: errorMessage(err) }, 'adapter reconcile failed'));
  }

  private recheck(): void {
    for (const [id, { adapters }] of this.#shards) {
      const shard = this.opts.shards.get(id);
      // Serving and not in trouble (UNHEALTHY): a READY or DRAINING engine can be asked.
      if (!shard || !isServing(shard.state) || isTrouble(shard.state)) continue;
      if (adapters.desired().length === 0 && adapters.statuses().length === 0) continue;
      void adapters.reconcile().catch(() => {});
    }
  }
}
