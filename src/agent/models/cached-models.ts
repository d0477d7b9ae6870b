import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { type CachedModel, CachedModelSchema } from '../../gen/llmgw/v1/agent_pb.js';
import type { StoredModel } from '../../models/scan-store.js';
import { type RevisionView, revisionKey } from './revision-views.js';

/** What Inventory says of the node's store: its models, and the room left within models.budget. */
export interface CachedModelsView {
  cachedModels: CachedModel[];
  freeBytes: bigint;
}

export const NO_STORE: CachedModelsView = { cachedModels: [], freeBytes: 0n };

/**
 * The store as placement reads it: one entry per revision pulled (a model
 * with none, one an engine fetched by itself, is listed with revision ''
 * and never complete), so a deployment can be matched on its model at its
 * --revision. bytes are the model's whole, partial files included; free is
 * what the budget still allows once the models and the compile caches
 * (`compileBytes`) are counted, not the disk's free space. A revision is
 * complete when every file the engines' loaders read is there (`views`,
 * revision-views.ts; without one, when its pull is whole), and its
 * residency (`resident`, by revisionKey) is over those files.
 */
export function cachedModelsView(
  models: readonly StoredModel[],
  budget: number,
  compileBytes = 0,
  resident: ReadonlyMap<string, number> = new Map(),
  views: ReadonlyMap<string, RevisionView> = new Map(),
): CachedModelsView {
  const cachedModels: CachedModel[] = [];
  let used = compileBytes;
  for (const m of models) {
    used += m.bytes;
    // Whole milliseconds: a pin folder's mtimeMs has a fraction, which Timestamp.nanos cannot encode (and the stream dies on).
    const lastUsed = timestampFromMs(Math.floor(m.lastUsedMs));
    const refs = Object.entries(m.refs).sort(([a], [b]) => a.localeCompare(b));
    if (refs.length === 0) cachedModels.push(create(CachedModelSchema, { repo: m.repo, revision: '', bytes: BigInt(m.bytes), complete: false, lastUsed }));
    for (const [revision, commit] of refs) {
      const key = revisionKey(m.repo, revision);
      const view = views.get(key);
      const complete = m.completeCommits.includes(commit) && (view?.complete ?? true);
      const residentBytes = complete ? BigInt(resident.get(key) ?? 0) : 0n;
      const loaded = view ? { loadBytes: BigInt(view.loadBytes), contentDigest: view.digest } : {};
      cachedModels.push(create(CachedModelSchema, { repo: m.repo, revision, bytes: BigInt(m.bytes), complete, lastUsed, residentBytes, ...loaded }));
    }
  }
  return { cachedModels, freeBytes: BigInt(Math.max(0, Math.floor(budget - used))) };
}
