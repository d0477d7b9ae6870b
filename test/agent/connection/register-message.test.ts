import { hostname } from 'node:os';
import { create, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { buildHeartbeat, buildRegister, describeNode } from '../../../src/agent/connection/register-message.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import {
  AgentMessageSchema,
  GpuLinkSchema,
  GpuProcessSchema,
  GpuSchema,
  HcaSchema,
  InventorySchema,
  MigDeviceSchema,
  NetInterfaceSchema,
  ProfileSchema,
  RunningShardSchema,
  ShardState,
  StartShardSchema,
} from '../../../src/gen/llmgw/v1/agent_pb.js';
import { MAX_HCA_ENTRIES, MAX_MODEL_BYTES, MAX_NAME_FIELD_BYTES } from '../../../src/lib/shard-field-problems.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

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
    shardId: parseShardId(shardId),
    replicaId: `rep-${shardId}`,
    spec: create(StartShardSchema, {
      shardId: parseShardId(shardId),
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
    expect(node).toEqual({ nodeId: 'gpu-node-7', hostname: hostname(), mgmtAddr: '10.1.2.3', version: '1.2.3', labels: { rack: 'r12' }, fabrics: CONFIG.fabrics, gangEndpoint: expect.any(Function) });
    expect(node.gangEndpoint()).toBe('');
    expect(describeNode(CONFIG, '1.2.3', () => '10.1.2.3:7471').gangEndpoint()).toBe('10.1.2.3:7471');
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

/** What a gRPC control plane takes by default (grpc's max receive message length). */
const GRPC_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const registerBytes = (reg: ReturnType<typeof buildRegister>) => toBinary(AgentMessageSchema, create(AgentMessageSchema, { messageId: 1n, msg: { case: 'register', value: reg } })).length;

describe('Register stays under 4 MiB by construction (security review 2, N6)', () => {
  it('sends empty the fields of a spec that StartShard refuses, whatever kept them', () => {
    const node = describeNode(CONFIG, '1.2.3');
    const s = shard('s-old', ShardState.READY);
    s.spec.pool = 'p'.repeat(12 * 1024 * 1024);
    s.spec.fabric = '\u001b[2Jib';
    s.spec.hcas = ['mlx5_0', 'x,^=mlx5_1'];
    s.spec.leaderAddr = '$(reboot)';
    if (s.spec.profile) s.spec.profile.servedModelName = 's'.repeat(300);
    const reg = buildRegister(node, create(InventorySchema, {}), [s]);
    const r = reg.runningShards[0];
    expect([r?.pool, r?.fabric, r?.hcas, r?.leaderAddr, r?.model, r?.profile]).toEqual(['', '', [], '10.1.2.3', '', 'tiny']);
    expect(registerBytes(reg)).toBeLessThan(4096);
  });

  it('stays under 4 MiB with every field at its bound for a shard on each GPU of a 64-GPU node with a large inventory', () => {
    // Every running shard holds at least one GPU of the inventory, none held
    // by another (LaunchAdmission), so a node has no more running shards
    // than GPUs; 64 is eight times an HGX node.
    const gpus = 64;
    const hcaPorts = Array.from({ length: MAX_HCA_ENTRIES }, (_, i) => create(HcaSchema, { name: `mlx5_${i}`, port: 1, state: 'ACTIVE', physState: 'LinkUp', rateGbps: 400, linkLayer: 'InfiniBand', fabric: 'ib-a', netdev: `ibp${i}s0` }));
    const label = (i: number) => `GPU${i}`;
    const inventory = create(InventorySchema, {
      gpus: Array.from({ length: gpus }, (_, i) =>
        create(GpuSchema, {
          index: i,
          uuid: `GPU-${'f'.repeat(36)}`,
          name: 'NVIDIA H100 80GB HBM3',
          computeCapability: '9.0',
          memoryTotalMb: 81559,
          pciBusId: '00000000:18:00.0',
          healthy: true,
          migMode: 'Enabled',
          migDevices: Array.from({ length: 7 }, (_, m) => create(MigDeviceSchema, { index: m, uuid: `MIG-${'e'.repeat(36)}`, profile: '1g.10gb' })),
        }),
      ),
      // nvidia-smi topo -m: every pair of GPUs and HCAs.
      links: Array.from({ length: (gpus + MAX_HCA_ENTRIES) ** 2 }, (_, i) => create(GpuLinkSchema, { a: label(i % 128), b: `mlx5_${i % 64}`, connection: 'NV18', nvlinks: 18 })),
      hcas: hcaPorts,
      interfaces: Array.from({ length: 512 }, (_, i) => create(NetInterfaceSchema, { name: `veth${i}abcdef`, addresses: ['10.244.1.1/24', 'fe80::1/64'], mac: '02:42:ac:11:00:02', up: true, mtu: 1500 })),
      processes: Array.from({ length: 512 }, (_, i) => create(GpuProcessSchema, { pid: 100000 + i, gpuUuid: `GPU-${'f'.repeat(36)}`, usedMemoryMb: 500, processName: `/opt/${'p'.repeat(250)}` })),
      warnings: Array.from({ length: 64 }, () => 'w'.repeat(512)),
      driverVersion: '550.54.15',
      cudaVersion: '12.4',
      hostname: 'h'.repeat(64),
    });
    const at = (n: number, c: string) => c.repeat(n);
    const hostname253 = Array.from({ length: 4 }, () => at(62, 'a')).join('.').slice(0, 253);
    const shards: ShardSnapshot[] = Array.from({ length: gpus }, (_, i) => {
      const id = `${i}`.padEnd(128, 'x');
      return {
        ...shard(id, ShardState.READY),
        replicaId: at(MAX_NAME_FIELD_BYTES, 'r'),
        spec: create(StartShardSchema, {
          shardId: id,
          replicaId: at(MAX_NAME_FIELD_BYTES, 'r'),
          gpuIndices: [i],
          hcas: Array.from({ length: MAX_HCA_ENTRIES }, (_, h) => `${at(MAX_NAME_FIELD_BYTES - 6, 'm')}${String(h).padStart(2, '0')}:999`),
          httpPort: 65535,
          leaderAddr: hostname253,
          leaderPort: 65535,
          rank: 0,
          nnodes: 1,
          pool: at(MAX_NAME_FIELD_BYTES, 'p'),
          fabric: at(MAX_NAME_FIELD_BYTES, 'f'),
          // An empty served name makes the model the one echoed: the longest.
          profile: create(ProfileSchema, { name: at(MAX_NAME_FIELD_BYTES, 'n'), engine: at(MAX_NAME_FIELD_BYTES, 'e'), model: at(MAX_MODEL_BYTES, 'o'), servedModelName: '' }),
        }),
        pid: 2 ** 31 - 1,
      };
    });
    const reg = buildRegister(describeNode(CONFIG, '1.2.3'), inventory, shards);
    const one = reg.runningShards[0];
    // Nothing was sent empty: this is the largest a running shard can be.
    expect([one?.pool.length, one?.model.length, one?.hcas.length, one?.leaderAddr]).toEqual([MAX_NAME_FIELD_BYTES, MAX_MODEL_BYTES, MAX_HCA_ENTRIES, hostname253]);
    const perShard = toBinary(RunningShardSchema, one ?? create(RunningShardSchema)).length;
    expect(perShard, 'the largest RunningShard').toBeLessThan(24 * 1024);
    const total = registerBytes(reg);
    const inventoryBytes = toBinary(InventorySchema, inventory).length;
    expect(total, `Register of ${gpus} maximal shards (${perShard} bytes each) and a ${inventoryBytes}-byte inventory`).toBeLessThan(GRPC_MAX_MESSAGE_BYTES);
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
