import { create } from '@bufbuild/protobuf';
import type { ShardSnapshot } from '../../src/agent/supervisor/shard/shard-snapshot.js';
import { GangMemberSchema, GangSchema, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardSnapshot } from './shard-snapshot.js';

/*
 * The gang the gang endpoint's tests ask about: gang g-0-g1 of replica g-0,
 * rank r (shard g-0-g1-r<r>) on node-<r>, its leader at 127.0.0.1:29500.
 */

const members = [0, 1].map((rank) => create(GangMemberSchema, { rank, nodeId: `node-${rank}`, shardId: `g-0-g1-r${rank}`, agentEndpoint: '' }));

/** The StartShard of `rank`; rank 1's agent answers at `endpoint` (rank 0's at none). */
export function twoRankSpec(rank: number, endpoint = ''): StartShard {
  return create(StartShardSchema, {
    shardId: `g-0-g1-r${rank}`,
    replicaId: 'g-0',
    rank,
    nnodes: 2,
    leaderAddr: '127.0.0.1',
    leaderPort: 29500,
    gang: create(GangSchema, { gangId: 'g-0-g1', members: members.map((m) => ({ ...m, agentEndpoint: m.rank === 1 ? endpoint : '' })) }),
  });
}

/** Rank 1 (a worker: no engine socket to ask) as node-1's agent runs it; READY unless `over` says otherwise. */
export function twoRankWorker(over: Partial<ShardSnapshot> = {}): ShardSnapshot {
  return shardSnapshot('g-0-g1-r1', { replicaId: 'g-0', spec: twoRankSpec(1), pid: 1, logPath: '', ...over });
}
