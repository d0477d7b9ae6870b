import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { ProfileSchema, type StartShard, StartShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { DeploymentProfile, DeploymentReplica } from './deployment.js';
import type { ShardRecord } from './replica-record.js';

/** The StartShard that tells a node to run shard `s` of replica `spec`. */
export function startShardMessage(s: ShardRecord, spec: DeploymentReplica): StartShard {
  return create(StartShardSchema, {
    shardId: s.shardId,
    replicaId: s.replicaId,
    rank: s.rank,
    nnodes: s.nnodes,
    gpuIndices: s.gpuIndices,
    httpPort: s.httpPort,
    leaderAddr: s.leaderAddr,
    leaderPort: s.leaderPort,
    pool: spec.pool,
    fabric: spec.fabric,
    profile: profileMessage(spec.profile),
  });
}

function profileMessage(p: DeploymentProfile) {
  return create(ProfileSchema, {
    name: p.name,
    engine: p.engine,
    model: p.model,
    servedModelName: p.servedModelName,
    tensorParallelSize: p.tensorParallelSize,
    pipelineParallelSize: p.pipelineParallelSize,
    args: p.args,
    env: p.env,
    startupTimeout: durationFromMs(p.startupTimeoutMs),
    minComputeCapability: p.minComputeCapability,
  });
}
