import { create } from '@bufbuild/protobuf';
import type { ShardSnapshot } from '../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { parseShardId } from '../../src/lib/shard-id.js';

/**
 * A READY, running shard's snapshot as the registry gives it, for tests of
 * what is built from one (status reports, ShardInfo, metrics); `over`
 * replaces any field, the spec included.
 */
export function shardSnapshot(id = 's1', over: Partial<ShardSnapshot> = {}): ShardSnapshot {
  return {
    shardId: parseShardId(id),
    replicaId: `r-${id}`,
    spec: create(StartShardSchema, { shardId: id, replicaId: `r-${id}`, gpuIndices: [0], profile: { engine: 'vllm', model: 'm' } }),
    state: ShardState.READY,
    pid: 4242,
    adopted: false,
    servesHttp: true,
    error: '',
    exitCode: null,
    signal: null,
    lastOutput: [],
    startedAtMs: 0,
    logPath: `/tmp/${id}.log`,
    running: true,
    ...over,
  };
}
