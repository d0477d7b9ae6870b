import { create } from '@bufbuild/protobuf';
import { PrefetchModelSchema, type StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { adapterRequestModel, parseEngineAdapterApi } from '../../lib/engine-adapter-api.js';
import { readStateFileSync } from '../../lib/files/state-file.js';
import { shardStatePath } from '../../lib/shard-layout.js';
import { pinModel, unpinModel } from '../../models/model-pins.js';
import { resolveStoreAdapter } from '../../models/adapters/resolve-adapter.js';
import { type AdapterTarget, adapterRequestsInFlight, listLoadedAdapters, loadAdapter, unloadAdapter } from '../engines/adapter-client.js';
import { engineKindOf } from '../engines/engine-catalog.js';
import { servedModelName } from '../engines/shard-launch.js';
import type { NodeModels } from '../models/node-models.js';
import { knownAnswerAsk } from '../supervisor/probes/known-answer-ask.js';
import type { KnownAnswerBook } from '../supervisor/probes/known-answer-book.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import { adapterLimitsOf } from './adapter-limits.js';
import type { AdapterStoreCalls } from './adapter-ports.js';
import type { ShardAdapterAccess, ShardAdapterFacts } from './node-adapters.js';
import { type BaseBaseline, proveAdapter } from './prove-adapter.js';

/*
 * The seams between the adapter room and the rest: a shard's facts from its
 * engine kind's wing (EngineKind.adapters), its engine reached through the
 * generic client (engines/adapter-client.ts) by the API recorded at its
 * launch, and the node's store (models/adapters/resolve-adapter.ts).
 */

/** What a shard's kind and spec say of its adapters. */
export function adapterFactsOf(spec: StartShard): ShardAdapterFacts {
  const engine = spec.profile?.engine ?? '';
  const kind = engineKindOf(engine)?.adapters;
  const limits = adapterLimitsOf(spec, kind?.limitsFromArgs(spec.profile?.args ?? []) ?? {});
  const modelNames = [...new Set([spec.profile?.model ?? '', servedModelName(spec)].filter((n) => n !== ''))];
  return { engine, hasApi: kind !== undefined, limits, modelNames, ...(kind?.refusesConfig ? { refusesConfig: (f) => kind.refusesConfig?.(f) } : {}) };
}

/** The flags and environment a start with adapters adds (the wing's adapters.launch); undefined for a shard that serves none. */
export function adapterLaunchOf(spec: StartShard): { args: string[]; env: Record<string, string> } | undefined {
  const kind = engineKindOf(spec.profile?.engine ?? '')?.adapters;
  const { limits } = adapterFactsOf(spec);
  if (!kind || limits.maxLoaded === 0) return undefined;
  return kind.launch(limits);
}

/** The node's store as the reconciler uses it; undefined without a store. */
export function adapterStoreCalls(models: NodeModels): AdapterStoreCalls | undefined {
  const store = models.store;
  if (!store) return undefined;
  return {
    resolve: (repo, revision) => resolveStoreAdapter(store.layout, repo, revision),
    // Through the node's prefetch: one pull per repo at a time, its progress on the stream as ModelPull, the budget kept.
    pull: (repo, revision) => models.prefetch(create(PrefetchModelSchema, { repo, revision })),
    pin: (repo, holder) => pinModel(store.layout, repo, holder),
    unpin: (repo, holder) => unpinModel(store.layout, repo, holder),
  };
}

/**
 * How a running shard's engine is reached for its adapters: the API its
 * launch recorded in the state file's watch (an adopted engine keeps the
 * API it was launched with), else its kind's; undefined for a kind with no
 * adapter API or a rank that serves no HTTP.
 */
export function shardAdapterAccess(shard: ShardSnapshot, stateDir: string, book: KnownAnswerBook): ShardAdapterAccess | undefined {
  const read = readStateFileSync(shardStatePath(stateDir, shard.shardId), shard.shardId);
  const watch = read.ok ? read.file.watch : undefined;
  if (!watch || watch.healthPort === 0 || watch.readiness !== 'model-listed') return undefined;
  const recorded = parseEngineAdapterApi((watch as { adapterApi?: unknown }).adapterApi);
  const api = recorded ?? engineKindOf(shard.spec.profile?.engine ?? '')?.adapters?.api;
  if (!api) return undefined;
  const baseUrl = `http://127.0.0.1:${watch.healthPort}`;
  const target: AdapterTarget = { baseUrl, apiKey: watch.apiKey, api };
  const served = servedModelName(shard.spec);
  const baseline: BaseBaseline = {};
  return {
    engine: {
      load: (name, dir, opts) => loadAdapter(target, name, dir, opts),
      unload: (name, opts) => unloadAdapter(target, name, opts),
      list: (opts) => listLoadedAdapters(target, opts),
      inFlight: (opts) => adapterRequestsInFlight(target, opts),
    },
    prove: (name, adapter, signal) =>
      proveAdapter(
        { baseUrl, apiKey: watch.apiKey, baseModel: served, ask: knownAnswerAsk(shard.spec), signal, adapterModel: (n) => adapterRequestModel(api, served, n) },
        name,
        { adapterDigest: adapter.digest, base: shard.modelDigest || `model:${shard.spec.profile?.model ?? ''}` },
        book,
        baseline,
      ),
    stall: { baseUrl, apiKey: watch.apiKey, model: served, inFlightGauges: watch.inFlightGauges, progressCounters: watch.progressCounters },
  };
}
