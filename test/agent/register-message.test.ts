import { hostname } from 'node:os';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { buildHeartbeat, buildRegister, describeNode } from '../../src/agent/register-message.js';
import type { ShardSnapshot } from '../../src/agent/supervisor/shard-snapshot.js';
import { GpuSchema, InventorySchema, ProfileSchema, ShardState, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';

const CONFIG = {
  nodeId: 'gpu-node-7',
  hostname: '',
  mgmtAddr: '10.1.2.3',
  mgmtInterface: 'eth0',
  labels: { rack: 'r12' },
  fabrics: [{ hca: 'mlx5_0', fabric: 'ib-a' }],
};

function shard(shardId: string, state: ShardState, rank = 0): ShardSnapshot {
  return {
    shardId,
    replicaId: `rep-${shardId}`,
    spec: create(StartShardSchema, {
      shardId,
      replicaId: `rep-${shardId}`,
      rank,
      nnodes: 2,
      gpuIndices: [0, 1],
      httpPort: 18000,
      leaderPort: 29500,
      profile: create(ProfileSchema, { name: 'tiny', engine: 'sim', model: 'org/tiny', servedModelName: 'tiny-chat' }),
    }),
    state,
    pid: 5000,
    adopted: false,
    servesHttp: rank === 0,
    error: '',
    exitCode: null,
    signal: null,
    lastOutput: [],
    startedAtMs: 0,
    logPath: '/dev/null',
    running: true,
  };
}

describe('describeNode', () => {
  it('takes the machine hostname when none is configured, and the configured management address', () => {
    const node = describeNode(CONFIG, '1.2.3');
    expect(node).toEqual({ nodeId: 'gpu-node-7', hostname: hostname(), mgmtAddr: '10.1.2.3', version: '1.2.3', labels: { rack: 'r12' }, fabrics: CONFIG.fabrics });
    expect(describeNode({ ...CONFIG, hostname: 'override' }, 'v').hostname).toBe('override');
  });
});

describe('buildRegister', () => {
  it('lists every shard that may still run, with the rank-0 leader at this node, and none that ended', () => {
    const node = describeNode(CONFIG, '1.2.3');
    const inventory = create(InventorySchema, { driverVersion: '550.54', gpus: [create(GpuSchema, { index: 0, uuid: 'GPU-a' })] });
    const reg = buildRegister(node, inventory, [
      shard('s-ready', ShardState.READY),
      shard('s-worker', ShardState.STARTING, 1),
      shard('s-failed', ShardState.FAILED),
      shard('s-exited', ShardState.EXITED),
      shard('s-stopped', ShardState.STOPPED),
      shard('s-draining', ShardState.DRAINING),
    ]);
    expect([reg.nodeId, reg.hostname, reg.mgmtAddr, reg.version]).toEqual(['gpu-node-7', hostname(), '10.1.2.3', '1.2.3']);
    expect(reg.labels).toEqual({ rack: 'r12' });
    expect(reg.fabrics.map((f) => [f.hca, f.fabric])).toEqual([['mlx5_0', 'ib-a']]);
    expect(reg.inventory?.driverVersion).toBe('550.54');
    expect(reg.runningShards.map((s) => [s.shardId, ShardState[s.state], s.leaderAddr, s.model])).toEqual([
      ['s-ready', 'READY', '10.1.2.3', 'tiny-chat'],
      ['s-worker', 'STARTING', '', 'tiny-chat'],
      ['s-draining', 'DRAINING', '10.1.2.3', 'tiny-chat'],
    ]);
  });

  it('lists an adopted shard still settling after a drain that outlived the agent as DRAINING, so traffic does not return', () => {
    const node = describeNode(CONFIG, '1.2.3');
    const reg = buildRegister(node, create(InventorySchema, {}), [
      { ...shard('s-drained', ShardState.STARTING), adopted: true, drainRequested: true },
      { ...shard('s-fresh', ShardState.STARTING), adopted: true },
      { ...shard('s-gone', ShardState.FAILED), drainRequested: true },
    ]);
    expect(reg.runningShards.map((s) => [s.shardId, ShardState[s.state]])).toEqual([
      ['s-drained', 'DRAINING'],
      ['s-fresh', 'STARTING'],
    ]);
  });
});

describe('buildHeartbeat', () => {
  const inventory = create(InventorySchema, { gpus: [create(GpuSchema, { index: 0, memoryUsedMb: 11 }), create(GpuSchema, { index: 1, memoryUsedMb: 22 })] });

  it('sends the sampler’s latest readings', () => {
    expect(buildHeartbeat('n1', [100, 200], inventory).gpuMemoryUsedMb).toEqual([100, 200]);
  });

  it('sends the inventory’s readings while the sampler has none yet', () => {
    const hb = buildHeartbeat('n1', [], inventory);
    expect([hb.nodeId, hb.gpuMemoryUsedMb]).toEqual(['n1', [11, 22]]);
  });
});
