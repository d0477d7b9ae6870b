import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { GangMemberSchema, GangSchema, ProfileSchema, type StartShard, StartShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { DeploymentProfile, DeploymentReplica } from './deployment.js';
import type { ShardRecord } from './replica-record.js';

/**
 * The gang of a multi-node generation (issue 40): every rank with its node
 * and where that node's agent answers for it (`agentEndpoint`: its
 * Register.gang_endpoint, '' when it has none) and its http_port (a vLLM
 * data-parallel rank 0 is watched by its API's /health). Undefined for one node.
 */
export function gangOf(shards: readonly ShardRecord[], agentEndpoint: (nodeId: string) => string) {
  const first = shards[0];
  if (!first || first.nnodes <= 1) return undefined;
  return create(GangSchema, {
    gangId: `${first.replicaId}-g${first.generation}`,
    members: [...shards].sort((a, b) => a.rank - b.rank).map((s) => create(GangMemberSchema, { rank: s.rank, nodeId: s.nodeId, shardId: s.shardId, agentEndpoint: agentEndpoint(s.nodeId), httpPort: s.httpPort })),
  });
}

/** The StartShard that tells a node to run shard `s` of replica `spec`, one rank of `gang` when it spans nodes. */
export function startShardMessage(s: ShardRecord, spec: DeploymentReplica, gang?: ReturnType<typeof gangOf>): StartShard {
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
    ...(gang ? { gang } : {}),
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
    sleepMode: p.sleepMode === true,
  });
}
