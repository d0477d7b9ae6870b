import { describe, expect, it } from 'vitest';
import type { ShardRecord } from '../../src/control/replica-record.js';
import { gangOf } from '../../src/control/start-shard-message.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';

describe("the reference control plane's gang", () => {
  it("lists every rank with its node's gang endpoint and its http_port (a vLLM data-parallel rank 0 is watched by its API's /health)", () => {
    const shard = (rank: number): ShardRecord => ({
      ...{ shardId: `g-0-g1-r${rank}`, replicaId: 'g-0', rank, nnodes: 2, nodeId: `node-${rank}`, gpuIndices: [0], httpPort: 8100 + rank },
      ...{ leaderAddr: '10.0.0.1', leaderPort: 29500, generation: 1, state: ShardState.STARTING, error: '', exitCode: 0, adopted: false },
    });
    const gang = gangOf([shard(1), shard(0)], (node) => (node === 'node-0' ? '10.0.0.1:7471' : ''));
    expect(gang?.members.map((m) => [m.rank, m.agentEndpoint, m.httpPort])).toEqual([
      [0, '10.0.0.1:7471', 8100],
      [1, '', 8101],
    ]);
  });
});
