import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { StatusRequestSchema, StatusResponseSchema } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { filterStatusShards } from '../../../src/agent/admin/status-shard-filter.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';

/** Three shards: one READY, one FAILED whose engine is gone, one FAILED whose engine may still run (it holds its GPUs). */
function fixture() {
  const shards = [
    { shardId: 'live', state: ShardState.READY, running: true },
    { shardId: 'gone', state: ShardState.FAILED, running: false },
    { shardId: 'held', state: ShardState.FAILED, running: true },
  ];
  const res = () => create(StatusResponseSchema, { shards: shards.map((s) => ({ shardId: s.shardId, state: s.state })) });
  return { res, snapshots: shards as unknown as ShardSnapshot[] };
}

describe('filterStatusShards: what ctl status hides, counted (walkthrough 4, O20)', () => {
  it('hides ended shards whose engine is gone by default and says how many; --all and --state hide none', () => {
    const { res, snapshots } = fixture();
    const byDefault = filterStatusShards(res(), create(StatusRequestSchema, {}), snapshots);
    expect([byDefault.shards.map((s) => s.shardId), byDefault.endedHidden]).toEqual([['live', 'held'], 1]);
    const all = filterStatusShards(res(), create(StatusRequestSchema, { all: true }), snapshots);
    expect([all.shards.length, all.endedHidden]).toEqual([3, 0]);
    const failed = filterStatusShards(res(), create(StatusRequestSchema, { states: [ShardState.FAILED] }), snapshots);
    expect([failed.shards.map((s) => s.shardId), failed.endedHidden]).toEqual([['gone', 'held'], 0]);
  });

  it('look-alike: nothing ended, nothing hidden (the hint is not printed)', () => {
    const { snapshots } = fixture();
    const res = create(StatusResponseSchema, { shards: [{ shardId: 'live', state: ShardState.READY }] });
    expect(filterStatusShards(res, create(StatusRequestSchema, {}), snapshots.slice(0, 1)).endedHidden).toBe(0);
  });
});
