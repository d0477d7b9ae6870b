import { create } from '@bufbuild/protobuf';
import { setTimeout as sleep } from 'node:timers/promises';
import { type AdapterSpec, AdapterState, type AdapterStatus, AdapterStatusSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { AdapterConfigFeatures } from '../../models/adapters/adapter-files.js';
import type { AdapterLedger } from './adapter-ledger.js';
import type { AdapterLimits } from './adapter-limits.js';
import { type AdapterEngineCalls, type AdapterStoreCalls, engineReasonOf, type ResolvedAdapter } from './adapter-ports.js';
import { resolvedAdapterProblem } from './adapter-set-problem.js';
import type { Proof } from './prove-adapter.js';

/** How long an unload waits for the engine's requests naming the adapter to end; then it is deferred to the next pass, never forced. */
export const UNLOAD_DRAIN_MS = 30_000;
/** How often the engine's per-adapter requests are read while an unload waits. */
export const UNLOAD_DRAIN_POLL_MS = 100;
/**
 * Longest the engine may take over one load or unload call. SGLang's unload
 * waits for the adapter's requests itself, and after `n > 1` traffic waits
 * for ever (SGLang #36894): the reconciler must not wait with it (the stall
 * watch, started with the call, says why).
 */
export const ADAPTER_CALL_LIMIT_MS = 120_000;

export interface ShardAdaptersOptions {
  shardId: string;
  engine: AdapterEngineCalls;
  store: AdapterStoreCalls;
  ledger: AdapterLedger;
  limits: AdapterLimits;
  /** The shard's model names an adapter's base must be one of (resolvedAdapterProblem). */
  baseModels: readonly string[];
  /** What of an adapter's config the engine refuses to load, in its words (EngineAdapters.refusesConfig): FAILED before the engine is asked. */
  refusesConfig?: (features: AdapterConfigFeatures) => string | undefined;
  /** The engine kind's name, for those refusals ('vllm', 'sglang'). */
  engineName?: string;
  prove: (name: string, adapter: ResolvedAdapter, signal: AbortSignal) => Promise<Proof>;
  /** What a status says changed: report it. */
  onChange: () => void;
  /** An adapter's unload is being asked: watch the engine for a stall (post-unload-stall-watch.ts). */
  onUnload?: (name: string) => void;
  log: Logger;
  /** Ends every pass: the shard stopped or the agent is going away (engines keep their adapters). */
  signal: AbortSignal;
  drainMs?: number;
  drainPollMs?: number;
  /** ADAPTER_CALL_LIMIT_MS by default. */
  callLimitMs?: number;
}

interface Entry {
  spec: AdapterSpec;
  state: AdapterState;
  reason: string;
  resolved?: ResolvedAdapter;
  loadMs: number;
  proven: boolean;
}

const sameSource = (a: AdapterSpec, b: AdapterSpec) => a.repo === b.repo && (a.revision || 'main') === (b.revision || 'main') && a.pinned === b.pinned;

/**
 * One shard's adapters: the desired set against what its engine lists,
 * reconciled one pass at a time (never two at once: a load and an unload of
 * one name must not race), unloads first so that a slot is free before a
 * load needs it. Each adapter's state changes only here, and every change
 * is reported (onChange). A pass that fails to list the engine changes
 * nothing; the next one (the set set again, the engine READY again, a
 * periodic recheck) tries again.
 */
export class ShardAdapters {
  #desired: AdapterSpec[] = [];
  readonly #entries = new Map<string, Entry>();
  #running: Promise<void> | undefined;
  #again = false;

  constructor(private readonly opts: ShardAdaptersOptions) {}

  /** The desired set, as last given. */
  desired(): AdapterSpec[] {
    return [...this.#desired];
  }

  /** Replaces the desired set (already judged whole: adapterSetProblem) and reconciles; resolves once a pass that saw it has ended. A FAILED adapter is tried again. */
  set(adapters: readonly AdapterSpec[]): Promise<void> {
    this.want(adapters);
    return this.reconcile();
  }

  /** Replaces the desired set without a pass (the engine is not serving yet: its READY reconciles). */
  want(adapters: readonly AdapterSpec[]): void {
    this.#desired = [...adapters];
    for (const e of this.#entries.values()) if (e.state === AdapterState.FAILED && this.#desired.some((d) => d.name === e.spec.name)) e.state = AdapterState.UNSPECIFIED;
  }

  /** Every loaded adapter is proven again at the next pass: the engine came back (a wake, a recovery) and may have lost or mixed them. */
  unprove(): void {
    for (const e of this.#entries.values()) e.proven = false;
  }

  /** The repos loaded for this shard: unpinned when its engine is gone. */
  loadedRepos(): { name: string; repo: string }[] {
    return [...this.#entries.values()].filter((e) => e.resolved).map((e) => ({ name: e.spec.name, repo: e.resolved?.repo ?? '' }));
  }

  /** Runs a pass now, or after the one running (which then runs again). */
  reconcile(): Promise<void> {
    if (this.#running) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false;
          await this.pass();
        } while (this.#again && !this.opts.signal.aborted);
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /** Each adapter desired or still held, as ShardStatus.adapters says it, by name. */
  statuses(): AdapterStatus[] {
    const names = new Set([...this.#desired.map((d) => d.name), ...this.#entries.keys()]);
    return [...names].sort().map((name) => {
      const e = this.#entries.get(name);
      const spec = e?.spec ?? this.#desired.find((d) => d.name === name);
      const r = e?.resolved;
      return create(AdapterStatusSchema, {
        name,
        repo: spec?.repo ?? '',
        revision: spec?.revision ?? '',
        digest: r?.digest ?? '',
        commit: r?.commit ?? '',
        rank: r?.rank ?? 0,
        state: e?.state ?? AdapterState.UNSPECIFIED,
        reason: e?.reason ?? '',
        loadMs: e?.loadMs ?? 0,
        proven: e?.proven ?? false,
      });
    });
  }

  private set_(e: Entry, state: AdapterState, reason: string): void {
    const changed = e.state !== state || e.reason !== reason;
    e.state = state;
    e.reason = reason;
    if (!changed) return;
    this.opts.log.info({ shard: this.opts.shardId, adapter: e.spec.name, state: AdapterState[state], reason }, 'adapter state');
    this.opts.onChange();
  }

  private async pass(): Promise<void> {
    const { engine, signal } = this.opts;
    if (signal.aborted) return;
    let listed: Set<string>;
    try {
      listed = new Set(await engine.list({ signal }));
    } catch (err) {
      if (signal.aborted) return;
      this.opts.log.warn({ shard: this.opts.shardId, err: errorMessage(err) }, 'could not list the engine\'s adapters; reconciled at the next pass');
      return;
    }
    const wanted = new Map(this.#desired.map((d) => [d.name, d]));
    // Unloads first: the slot an unload frees is what a load may need.
    for (const name of new Set([...listed, ...this.#entries.keys()])) {
      const want = wanted.get(name);
      const e = this.#entries.get(name);
      const other = want && e?.resolved && listed.has(name) && !sameSource(e.spec, want);
      if (want && !other) continue;
      if (!listed.has(name)) {
        if (e?.resolved) await this.forget(name, e);
        else this.#entries.delete(name);
        this.opts.onChange();
        continue;
      }
      if (signal.aborted) return;
      if (await this.unload(name, e ?? { spec: { name } as AdapterSpec, state: AdapterState.UNSPECIFIED, reason: '', loadMs: 0, proven: false })) listed.delete(name);
    }
    for (const spec of this.#desired) {
      if (signal.aborted) return;
      const e = this.#entries.get(spec.name);
      if (e && e.state === AdapterState.FAILED && sameSource(e.spec, spec)) continue;
      if (e && e.state === AdapterState.UNLOADING) continue;
      if (e && e.state === AdapterState.LOADED && listed.has(spec.name)) {
        if (!e.proven && e.resolved) await this.prove(e, e.resolved);
        continue;
      }
      await this.load(spec, listed);
    }
  }

  /** Loads (or, when the engine already lists it, adopts) one adapter and proves it. */
  private async load(spec: AdapterSpec, listed: Set<string>): Promise<void> {
    const { engine, store, ledger, signal, shardId } = this.opts;
    const before = this.#entries.get(spec.name);
    const e: Entry = { spec, state: before?.state ?? AdapterState.UNSPECIFIED, reason: before?.reason ?? '', loadMs: 0, proven: false };
    this.#entries.set(spec.name, e);
    const revision = spec.revision || 'main';
    let resolved: ResolvedAdapter;
    try {
      resolved = await store.resolve(spec.repo, revision);
    } catch {
      this.set_(e, AdapterState.PULLING, `pulling ${spec.repo}@${revision} into the node's store`);
      try {
        await store.pull(spec.repo, revision, signal);
        resolved = await store.resolve(spec.repo, revision);
      } catch (err) {
        if (!signal.aborted) this.set_(e, AdapterState.FAILED, errorMessage(err));
        return;
      }
    }
    e.resolved = resolved;
    const problem = resolvedAdapterProblem({ name: spec.name, baseModel: resolved.baseModel, rank: resolved.rank }, { baseModels: this.opts.baseModels, maxRank: this.opts.limits.maxRank });
    const refused = resolved.features && this.opts.refusesConfig?.(resolved.features);
    const unloadable = refused ? `adapter ${spec.name} (${resolved.repo}) cannot be loaded by ${this.opts.engineName || 'this engine'}: ${refused}; use an adapter without it (merge or convert it to plain LoRA)` : undefined;
    const conflict = problem ?? unloadable ?? ledger.conflict(spec.name, resolved.digest, shardId);
    if (conflict !== undefined) {
      e.resolved = undefined;
      this.set_(e, AdapterState.FAILED, conflict);
      return;
    }
    if (listed.has(spec.name)) {
      // Found loaded (an agent restarted under the engine): proven, not loaded again.
      this.set_(e, AdapterState.LOADING, 'found loaded in the engine; proving it');
    } else {
      if (listed.size >= this.opts.limits.maxLoaded) {
        this.set_(e, AdapterState.LOADING, `waiting for a free slot: the engine holds ${listed.size} of ${this.opts.limits.maxLoaded}`);
        return;
      }
      this.set_(e, AdapterState.LOADING, `loading ${resolved.repo}@${resolved.commit.slice(0, 12) || revision}`);
      await store.pin(resolved.repo, shardId).catch(() => {});
      const t0 = performance.now();
      try {
        await engine.load(spec.name, resolved.dir, { pinned: spec.pinned, signal: this.callSignal() });
      } catch (err) {
        if (signal.aborted) return;
        await store.unpin(resolved.repo, shardId).catch(() => {});
        e.resolved = undefined;
        this.set_(e, AdapterState.FAILED, `the engine refused the load: ${engineReasonOf(err)}`);
        return;
      }
      e.loadMs = Math.max(1, Math.round(performance.now() - t0));
      let now: string[];
      try {
        now = await engine.list({ signal });
      } catch (err) {
        now = [];
        if (signal.aborted) return;
        this.opts.log.warn({ shard: shardId, adapter: spec.name, err: errorMessage(err) }, 'could not list the engine after a load');
      }
      if (!now.includes(spec.name)) {
        this.set_(e, AdapterState.FAILED, `the engine answered the load of ${spec.name} but does not list it; set the adapters again to retry`);
        return;
      }
      listed.add(spec.name);
    }
    await ledger.hold(spec.name, resolved.digest, shardId);
    await this.prove(e, resolved);
  }

  private async prove(e: Entry, resolved: ResolvedAdapter): Promise<void> {
    let proof: Proof;
    try {
      proof = await this.opts.prove(e.spec.name, resolved, this.opts.signal);
    } catch (err) {
      if (this.opts.signal.aborted) return;
      proof = { kind: 'unproven', reason: `unproven: ${errorMessage(err)}` };
    }
    if (proof.kind === 'failed') {
      e.proven = false;
      this.set_(e, AdapterState.FAILED, proof.reason);
      return;
    }
    e.proven = proof.kind === 'proven';
    this.set_(e, AdapterState.LOADED, proof.kind === 'proven' ? `proven: ${proof.how}` : proof.reason);
  }

  /**
   * Unloads one adapter the engine lists and nobody wants, once the
   * engine's requests naming it have ended: an unload under traffic fails
   * those requests (issue 53: "adapters unloaded while requests still name
   * them"). A drain that outlasts its bound defers the unload, reported;
   * then the engine must no longer list it. True once it is gone.
   */
  private async unload(name: string, e: Entry): Promise<boolean> {
    const { engine, signal } = this.opts;
    this.#entries.set(name, e);
    this.set_(e, AdapterState.UNLOADING, 'waiting for its requests to end');
    const deadline = performance.now() + (this.opts.drainMs ?? UNLOAD_DRAIN_MS);
    for (;;) {
      let busy: number;
      try {
        const m = await engine.inFlight({ signal });
        const c = m?.get(name);
        busy = c ? c.running + c.waiting : 0;
      } catch (err) {
        if (signal.aborted) return false;
        this.set_(e, AdapterState.UNLOADING, `could not read its requests (${errorMessage(err)}); unload deferred`);
        return false;
      }
      if (busy === 0) break;
      if (performance.now() >= deadline) {
        this.set_(e, AdapterState.UNLOADING, `${busy} request${busy === 1 ? '' : 's'} still name it after ${Math.round((this.opts.drainMs ?? UNLOAD_DRAIN_MS) / 1000)} s; unload deferred to the next pass`);
        return false;
      }
      try {
        await sleep(this.opts.drainPollMs ?? UNLOAD_DRAIN_POLL_MS, undefined, { signal });
      } catch {
        return false;
      }
    }
    this.opts.onUnload?.(name);
    try {
      await engine.unload(name, { signal: this.callSignal() });
      if ((await engine.list({ signal })).includes(name)) {
        this.set_(e, AdapterState.FAILED, `the engine answered the unload of ${name} but still lists it; its slot may still be taken (vLLM #54839)`);
        return false;
      }
    } catch (err) {
      if (!signal.aborted) this.set_(e, AdapterState.FAILED, `the engine refused or did not finish the unload: ${engineReasonOf(err)}`);
      return false;
    }
    await this.forget(name, e);
    this.opts.onChange();
    return true;
  }

  /** The shard's life, bounded by ADAPTER_CALL_LIMIT_MS: one engine call. */
  private callSignal(): AbortSignal {
    return AbortSignal.any([this.opts.signal, AbortSignal.timeout(this.opts.callLimitMs ?? ADAPTER_CALL_LIMIT_MS)]);
  }

  /** The adapter is gone from the engine: its name, pin and entry let go. */
  private async forget(name: string, e: Entry): Promise<void> {
    this.#entries.delete(name);
    await this.opts.ledger.release(name, this.opts.shardId);
    if (e.resolved) await this.opts.store.unpin(e.resolved.repo, this.opts.shardId).catch(() => {});
  }
}
