import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { discover } from '../../../src/agent/discovery/discover.js';
import type { ValidationContext } from '../../../src/agent/engines/engine.js';
import { chooseRankFabric } from '../../../src/agent/engines/rank-fabric.js';
import { chooseRankPlacement, readHostTopology } from '../../../src/agent/engines/rank-placement.js';
import { placementProperties } from '../../../src/agent/supervisor/launch/launch-shard.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import type { Inventory } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { FAKE_NVIDIA_SMI, SYSFS_FIXTURE } from '../../helpers/fake-gpus.js';
import { context, shard } from './engine-fixtures.js';

/*
 * Issue 40, item 4: a multi-node rank's HCAs from the node's topology, read
 * by the real discovery from the hgx-h100x8 data set (nvidia-smi topo -m and
 * a sysfs tree): GPUs 0-1 sit under mlx5_0 (PXB), 2-3 under mlx5_1, 4-5 under
 * mlx5_2, 6-7 under mlx5_3, whose port 1 is DOWN.
 */

let inventory: Inventory;
beforeAll(async () => {
  vi.stubEnv('LLMGW_FAKE_GPUS', 'hgx-h100x8');
  inventory = await discover({ nvidiaSmi: FAKE_NVIDIA_SMI, sysfsRoot: SYSFS_FIXTURE, timeoutMs: 20_000, fabrics: [] });
}, 30_000);
afterAll(() => vi.unstubAllEnvs());

const twoNodes = { nnodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500 };

describe("a multi-node rank's HCAs", () => {
  it('are those nearest its GPUs in the topology, with each active port for UCX', () => {
    expect(chooseRankFabric(shard({ ...twoNodes, gpuIndices: [0, 1, 2, 3] }), inventory)).toEqual({ fabric: { hcas: ['mlx5_0', 'mlx5_1'], ucxDevices: ['mlx5_0:1', 'mlx5_1:1'] } });
    expect(chooseRankFabric(shard({ ...twoNodes, gpuIndices: [5, 4] }), inventory)).toEqual({ fabric: { hcas: ['mlx5_2'], ucxDevices: ['mlx5_2:1'] } });
  });

  it('refuse a start whose nearest HCA is down, naming it and its port, at once', () => {
    expect(chooseRankFabric(shard({ ...twoNodes, gpuIndices: [6, 7] }), inventory)).toEqual({
      refused:
        'shard s1: HCA mlx5_3 (nearest GPU 6, PXB) has no active port: port 1 DOWN (Disabled); a multi-node rank would start on it and fail minutes in; fix its link, or name the HCAs to use in hcas',
    });
  });

  it('are the control plane\'s when it names them, checked the same way', () => {
    expect(chooseRankFabric(shard({ ...twoNodes, gpuIndices: [6, 7], hcas: ['mlx5_2'] }), inventory)).toEqual({ fabric: { hcas: ['mlx5_2'], ucxDevices: ['mlx5_2:1'] } });
    expect(chooseRankFabric(shard({ ...twoNodes, gpuIndices: [0, 1], hcas: ['mlx5_3'] }), inventory)).toMatchObject({ refused: expect.stringMatching(/^shard s1: HCA mlx5_3 \(named in hcas\) has no active port: port 1 DOWN/) });
  });

  it('are not chosen, nor checked, for a shard on one node: it talks over NVLink', () => {
    expect(chooseRankFabric(shard({ gpuIndices: [6, 7] }), inventory)).toEqual({});
  });

  it('reach the engine as NCCL_IB_HCA and UCX_NET_DEVICES, under the operator\'s own settings, which win', async () => {
    const ctx: ValidationContext = { ...context(), inventory };
    const spec = shard({ ...twoNodes, gpuIndices: [2, 3], profile: { tensorParallelSize: 4 } });
    const engine = new VllmEngine({ command: [process.execPath] }, 'eth0');
    await engine.validate(spec, ctx);
    expect(engine.command(spec).env).toMatchObject({ NCCL_IB_HCA: '=mlx5_1:1', UCX_NET_DEVICES: 'mlx5_1:1' });
    const pinned = new VllmEngine({ command: [process.execPath], env: { NCCL_IB_HCA: '=mlx5_0' } }, 'eth0');
    await pinned.validate(spec, ctx);
    expect(pinned.command(spec).env).toMatchObject({ NCCL_IB_HCA: '=mlx5_0', UCX_NET_DEVICES: 'mlx5_1:1' });
    // A down link refuses the start through validation, before anything runs.
    await expect(engine.validate(shard({ ...twoNodes, gpuIndices: [6, 7], profile: { tensorParallelSize: 4 } }), ctx)).rejects.toThrow(/HCA mlx5_3 \(nearest GPU 6, PXB\) has no active port/);
  });
});

describe("a multi-node rank's CPUs and NUMA node", () => {
  const host = (cpus: number[], nodes: number[]) => ({ cpus: new Set(cpus), numaNodes: new Set(nodes) });
  const big = host([...Array(224).keys()], [0, 1]);

  it('are its GPUs\' CPU affinity and NUMA node, from the topology (GPUs 0-3 on node 0, 4-7 on node 1)', () => {
    expect(inventory.gpus.map((g) => [g.index, g.numaNode, g.cpuAffinity])).toContainEqual([5, 1, '56-111,168-223']);
    expect(chooseRankPlacement(shard({ ...twoNodes, gpuIndices: [0, 1] }), inventory, big)).toEqual({ cpus: '0-55,112-167', numaNode: 0, why: 'NUMA node 0, CPUs 0-55,112-167' });
    expect(chooseRankPlacement(shard({ ...twoNodes, gpuIndices: [4, 5] }), inventory, big)).toEqual({ cpus: '56-111,168-223', numaNode: 1, why: 'NUMA node 1, CPUs 56-111,168-223' });
  });

  it('bind no memory for GPUs on two NUMA nodes, keep only CPUs this machine has online, and say so', () => {
    expect(chooseRankPlacement(shard({ ...twoNodes, gpuIndices: [3, 4] }), inventory, big)).toMatchObject({ cpus: '0-223', why: 'no NUMA binding (its GPUs sit on several NUMA nodes), CPUs 0-223' });
    expect(chooseRankPlacement(shard({ ...twoNodes, gpuIndices: [0] }), inventory, host([0, 1], [0]))).toEqual({ cpus: '0-1', numaNode: 0, why: "NUMA node 0, CPUs 0-1 (of its GPUs' 0-55,112-167, those online here)" });
    expect(chooseRankPlacement(shard({ ...twoNodes, gpuIndices: [4] }), inventory, host([0, 1], [0]))).toEqual({
      why: "no NUMA binding (NUMA node 1 is not online here); no CPU pinning (its GPUs' CPUs 56-111,168-223 are not online here)",
    });
    expect(chooseRankPlacement(shard({ gpuIndices: [0] }), inventory, big)).toBeUndefined();
  });

  it('reach the launch (taskset for the direct launcher, CPUAffinity and NUMAPolicy for a unit), the operator\'s unit properties winning', async () => {
    const ctx: ValidationContext = { ...context(), inventory };
    const spec = shard({ ...twoNodes, gpuIndices: [0, 1], profile: { tensorParallelSize: 4 } });
    const engine = new VllmEngine({ command: [process.execPath] }, 'eth0');
    await engine.validate(spec, ctx);
    const placement = engine.command(spec).placement;
    const online = readHostTopology();
    expect(placement?.why).toMatch(/^(NUMA node 0|no NUMA binding \(NUMA node 0 is not online here\))/);
    if (placement?.cpus !== undefined) {
      expect(placement.taskset).toMatch(/\/taskset$/);
      expect([...online.cpus].length).toBeGreaterThan(0);
    }
    expect(placementProperties({ cpus: '0-1', numaNode: 0, why: '' })).toEqual({ CPUAffinity: '0-1', NUMAPolicy: 'bind', NUMAMask: '0' });
    const pinnedByOperator = new VllmEngine({ command: ['taskset', '-c', '1', process.execPath] }, 'eth0');
    await pinnedByOperator.validate(spec, ctx);
    expect(pinnedByOperator.command(spec).placement).toMatchObject({ cpus: undefined, why: expect.stringMatching(/not pinned by the agent: engines\.vllm\.command starts with taskset, which wins$/) });
  });
});
