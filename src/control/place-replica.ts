import type { Gpu, GpuProcess, ModelWarmth } from '../gen/llmgw/v1/agent_pb.js';
import { describeExpected, type ExpectedReady, expectedReady } from './expected-ready.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../lib/foreign-memory-problem.js';
import type { DeploymentReplica } from './deployment.js';
import { profileModelKey } from './warm-models.js';

/** A connected node as placement sees it. */
export interface PlacementNode {
  id: string;
  labels: Readonly<Record<string, string>>;
  gpus: readonly Gpu[];
  /** GPU indices held by shards placed here, including ones still stopping. */
  usedGpus: ReadonlySet<number>;
  /** The node's compute processes (Inventory.processes): memory they do not explain is someone else's. */
  processes?: readonly GpuProcess[];
  /** Models complete in the node's store (warmModels: `org/name@revision`): a replica of one loads there from local disk. */
  warmModels?: ReadonlySet<string>;
  /** What the node's agent measured of each model's time to READY (Inventory.warmth, issue 41). */
  warmth?: readonly ModelWarmth[];
}

export interface ShardPlacement {
  nodeId: string;
  gpuIndices: number[];
  /** What the node expects of this start, when its agent measured it (expectedReady). */
  expected?: ExpectedReady;
}

/** `considered`: each node that fit, with what it expected ("node-b: 6.0s from store"), in the order chosen. */
export type PlacementResult = { ok: true; shards: ShardPlacement[]; considered?: string[] } | { ok: false; reason: string };

/**
 * Chooses nodes and GPUs for one replica: one shard on each of `nnodes`
 * distinct nodes, each with `gpusPerShard` free healthy GPUs of at least the
 * profile's compute capability, and whose memory is not held by something
 * the node cannot see (the agent refuses those: placing there again and
 * again would loop on refusals). The node whose agent measured the soonest
 * time to READY for this model, engine and profile from what it offers now
 * goes first (expectedReady, issue 41); nodes that measured nothing come
 * after. Among those alike, the fullest node that still fits goes first
 * (best fit), so that large replicas later still find whole empty nodes; of
 * nodes that fit as well, one whose store holds the replica's model complete
 * goes first (its engine loads from local disk, offline, instead of minutes
 * of download: issue 30); then by node id so that a placement is
 * reproducible. The first node chosen hosts rank 0, the leader.
 */
export function placeReplica(replica: DeploymentReplica, nodes: readonly PlacementNode[]): PlacementResult {
  const min = replica.profile.minComputeCapability;
  const model = profileModelKey(replica.profile);
  const fits: { id: string; free: number[]; warm: boolean; expected?: ExpectedReady }[] = [];
  /** "node-a GPU 3, 4": left out only for memory nobody listed holds, which the reason must say. */
  const squatted: string[] = [];
  for (const node of nodes) {
    if (replica.pool !== '' && node.labels.pool !== replica.pool) continue;
    const candidates = node.gpus.filter((g) => g.healthy && !node.usedGpus.has(g.index) && meetsCapability(g.computeCapability, min));
    const foreign = candidates.filter((g) => foreignMemoryProblem(g, node.processes ?? [], DEFAULT_FOREIGN_MEMORY_SHARE) !== undefined);
    if (foreign.length > 0) squatted.push(`${node.id} GPU ${foreign.map((g) => g.index).join(', ')}`);
    const free = candidates
      .filter((g) => !foreign.includes(g))
      .map((g) => g.index)
      .sort((a, b) => a - b);
    const expected = expectedReady(replica.profile, node.warmth);
    if (free.length >= replica.gpusPerShard) fits.push({ id: node.id, free, warm: node.warmModels?.has(model) === true, ...(expected ? { expected } : {}) });
  }
  if (fits.length < replica.nnodes) {
    const where = replica.pool === '' ? 'connected nodes' : `connected nodes of pool ${replica.pool}`;
    const what = replica.gpusPerShard === 0 ? 'a node' : `${replica.gpusPerShard} free healthy GPU(s)${min ? ` of compute capability ${min} or more` : ''}`;
    return {
      ok: false,
      reason:
        `needs ${replica.nnodes} node(s) with ${what}; ${fits.length} of the ${where} have that` +
        (squatted.length > 0 ? ` (left out, their memory used by no process the node lists: ${squatted.join('; ')})` : ''),
    };
  }
  // The node that will serve soonest by its own measurement first (issue 41); unmeasured nodes after the measured ones.
  const soon = (n: (typeof fits)[number]) => n.expected?.seconds ?? Number.POSITIVE_INFINITY;
  fits.sort((a, b) => soon(a) - soon(b) || a.free.length - b.free.length || Number(b.warm) - Number(a.warm) || a.id.localeCompare(b.id));
  return {
    ok: true,
    shards: fits.slice(0, replica.nnodes).map((n) => ({ nodeId: n.id, gpuIndices: n.free.slice(0, replica.gpusPerShard), ...(n.expected ? { expected: n.expected } : {}) })),
    ...(fits.some((n) => n.expected) ? { considered: fits.map((n) => describeExpected(n.id, n.expected)) } : {}),
  };
}

/**
 * Whether a GPU's "major.minor" meets a minimum. A GPU whose driver does not
 * say is given the benefit of the doubt: the agent validates the profile
 * against the real device before launching and reports FAILED if it does not
 * fit, which is a clearer error than a replica that never places.
 */
export function meetsCapability(actual: string, min: string): boolean {
  if (min === '' || actual === '') return true;
  const [aMajor = 0, aMinor = 0] = actual.split('.').map(Number);
  const [mMajor = 0, mMinor = 0] = min.split('.').map(Number);
  return aMajor > mMajor || (aMajor === mMajor && aMinor >= mMinor);
}
