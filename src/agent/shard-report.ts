import { create } from '@bufbuild/protobuf';
import {
  RunningShardSchema,
  ShardState,
  ShardStatusSchema,
  type RunningShard,
  type ShardStatus,
  type StartShard,
} from '../gen/llmgw/v1/agent_pb.js';
import type { ShardSnapshot } from './supervisor/shard-snapshot.js';

/** The ShardStatus message that reports a snapshot. */
export function statusFromSnapshot(nodeId: string, s: ShardSnapshot): ShardStatus {
  return create(ShardStatusSchema, {
    nodeId,
    replicaId: s.replicaId,
    shardId: s.shardId,
    state: s.state,
    error: s.error,
    exitCode: s.exitCode ?? 0,
    lastOutput: s.lastOutput,
    pid: s.pid,
    signal: s.signal ?? '',
    adopted: s.adopted,
  });
}

/** A FAILED report for a start that was refused before anything was launched. */
export function refusedStatus(nodeId: string, spec: Pick<StartShard, 'shardId' | 'replicaId'>, error: string): ShardStatus {
  return create(ShardStatusSchema, {
    nodeId,
    replicaId: spec.replicaId,
    shardId: spec.shardId,
    state: ShardState.FAILED,
    error,
  });
}

/** How a supervised shard is described in Register, so a restarted control plane recovers from it. */
export function runningShardFromSnapshot(s: ShardSnapshot, mgmtAddr: string): RunningShard {
  const spec = s.spec;
  return create(RunningShardSchema, {
    replicaId: s.replicaId,
    shardId: s.shardId,
    rank: spec.rank,
    nnodes: spec.nnodes,
    gpuIndices: spec.gpuIndices,
    hcas: spec.hcas,
    httpPort: spec.httpPort,
    state: s.state,
    model: spec.profile?.servedModelName || spec.profile?.model || '',
    profile: spec.profile?.name ?? '',
    pool: spec.pool,
    fabric: spec.fabric,
    leaderAddr: spec.leaderAddr || (spec.rank === 0 ? mgmtAddr : ''),
    leaderPort: spec.leaderPort,
    pid: s.pid,
    engine: spec.profile?.engine ?? '',
  });
}
