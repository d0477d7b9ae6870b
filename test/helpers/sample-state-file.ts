import { create } from '@bufbuild/protobuf';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { ShardStateFile } from '../../src/lib/files/state-file.js';
import { parseShardId, parseStartShard } from '../../src/lib/shard-id.js';

/** A valid state file of shard s0 (a vLLM engine on GPUs 0 and 1, pid 1234); `over` replaces any field. */
export function sampleStateFile(over: Partial<ShardStateFile> = {}): ShardStateFile {
  return {
    schemaVersion: 1,
    shardId: parseShardId('s0'),
    replicaId: 'r0',
    spec: parseStartShard(create(StartShardSchema, { shardId: 's0', replicaId: 'r0', gpuIndices: [0, 1], profile: { engine: 'vllm', args: ['--x'] } })),
    servesHttp: true,
    inFlightMetric: 'vllm:num_requests_running',
    generationTokensMetric: 'vllm:generation_tokens_total',
    drainRequested: false,
    pid: 1234,
    pgid: 1234,
    identity: { startTime: '99', bootId: 'b' },
    launcher: 'direct',
    logPath: '/var/log/llmgw/shards/s0.log',
    createdAtMs: 1,
    ...over,
  };
}
