import { type RunningShard, ShardState } from '../gen/llmgw/v1/agent_pb.js';
import { isReported } from '../lib/shard-states.js';
import type { ShardRecord } from './replica-record.js';

/** The record of a shard a node reported in running_shards, found rather than started by us. */
export function shardFromRunning(nodeId: string, rs: RunningShard, generation: number): ShardRecord {
  return {
    shardId: rs.shardId,
    replicaId: rs.replicaId,
    rank: rs.rank,
    nnodes: rs.nnodes,
    nodeId,
    gpuIndices: [...rs.gpuIndices],
    httpPort: rs.httpPort,
    leaderAddr: rs.leaderAddr,
    leaderPort: rs.leaderPort,
    generation,
    state: isReported(rs.state) ? rs.state : ShardState.STARTING,
    error: '',
    exitCode: 0,
    adopted: true,
  };
}
