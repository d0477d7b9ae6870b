import { create } from '@bufbuild/protobuf';
import { type PrefetchModel, PrefetchModelSchema, type Register } from '../gen/llmgw/v1/agent_pb.js';
import type { Deployment } from './deployment.js';
import { profileModelKey, warmKey } from './warm-models.js';

/**
 * The PrefetchModels a node gets when it registers (issue 39): for each
 * profile with `prefetch` that one of the deployment's replicas could run on
 * it (its pool), the profile's model at its revision, unless the node's
 * store holds it complete already (and, for page-cache, resident). A start
 * there then loads from local disk, offline, or from memory. A model given
 * as a local path is the node's own business: nothing to pull.
 */
export function prefetchForNode(deployment: Deployment, register: Register): PrefetchModel[] {
  const labels = register.labels;
  const cached = new Map((register.inventory?.cachedModels ?? []).map((m) => [warmKey(m.repo, m.revision), m]));
  const out = new Map<string, PrefetchModel>();
  for (const r of deployment.replicas) {
    const p = r.profile;
    if (!p.prefetch || p.prefetch === 'none' || (r.pool !== '' && labels.pool !== r.pool)) continue;
    if (p.model.startsWith('/') || p.model.startsWith('.') || !p.model.includes('/')) continue;
    const key = profileModelKey(p);
    const have = cached.get(key);
    const pageCache = p.prefetch === 'page-cache';
    if (have?.complete && (!pageCache || have.residentBytes >= (have.loadBytes > 0n ? have.loadBytes : have.bytes))) continue;
    const revision = key.slice(key.lastIndexOf('@') + 1);
    const prev = out.get(key);
    out.set(key, create(PrefetchModelSchema, { repo: p.model, revision, pageCache: pageCache || prev?.pageCache === true }));
  }
  return [...out.values()];
}
