import type { RunningShard } from '../gen/llmgw/v1/agent_pb.js';
import type { ReplicaRecord } from './replica-record.js';

/**
 * Why a shard found running cannot join its replica's current shards, or
 * undefined when it can be adopted. Ranks of different generations never
 * join one collective: adopting one would leave a replica that never serves.
 */
export function adoptionConflict(replica: ReplicaRecord, rs: RunningShard, generation: number): string | undefined {
  const spec = replica.spec;
  return rs.nnodes !== spec.nnodes || rs.rank < 0 || rs.rank >= spec.nnodes
    ? `it spans ${rs.nnodes} node(s) as rank ${rs.rank}, the deployment says ${spec.nnodes}`
    : replica.shards.some((s) => s.rank === rs.rank)
      ? `replica ${spec.id} already has rank ${rs.rank} (${replica.shards.find((s) => s.rank === rs.rank)?.shardId})`
      : replica.shards.length > 0 && replica.shards[0]?.generation !== generation
        ? `its other ranks belong to generation ${replica.shards[0]?.generation}; ranks of different generations never join one collective`
        : undefined;
}
