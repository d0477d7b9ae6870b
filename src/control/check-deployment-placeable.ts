import type { DeploymentReplica } from './deployment.js';
import { type PlacementNode, placeReplica } from './place-replica.js';

/** A replica that cannot be placed on the nodes as they are, even with nothing else running. */
export interface Unplaceable {
  replicaId: string;
  /** placeReplica's reason, naming what is missing and what was left out (foreign memory). */
  reason: string;
  /** How many replicas before it did fit. */
  placedBefore: number;
}

/**
 * Places every replica, in order, on `nodes` as if nothing ran there yet,
 * by placeReplica's own rule (healthy GPUs, capability, no foreign memory,
 * one replica's GPUs taken before the next): the first replica that does not
 * fit, or undefined when all do. A dry run: nothing is started or reserved.
 * With the nodes that will ever connect already connected (`dev up`'s one
 * agent), a replica that does not fit here never will, and waiting for it is
 * waiting for ever (new-operator walkthrough 2, row 4: `--replicas 8` on
 * the fake box, whose GPUs 3 and 4 hold foreign memory).
 */
export function checkDeploymentPlaceable(replicas: readonly DeploymentReplica[], nodes: readonly PlacementNode[]): Unplaceable | undefined {
  const used = new Map(nodes.map((n) => [n.id, new Set<number>()]));
  const view = () => nodes.map((n) => ({ ...n, usedGpus: used.get(n.id) as Set<number> }));
  for (const [i, replica] of replicas.entries()) {
    const result = placeReplica(replica, view());
    if (!result.ok) return { replicaId: replica.id, reason: result.reason, placedBefore: i };
    for (const s of result.shards) for (const g of s.gpuIndices) used.get(s.nodeId)?.add(g);
  }
  return undefined;
}
