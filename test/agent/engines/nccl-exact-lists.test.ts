import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { discover } from '../../../src/agent/discovery/discover.js';
import type { ValidationContext } from '../../../src/agent/engines/engine.js';
import { SglangEngine } from '../../../src/agent/engines/sglang/sglang-engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import type { Inventory } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { FAKE_NVIDIA_SMI } from '../../helpers/fake-gpus.js';
import { ncclSelects, sysfsHcaPorts } from '../../helpers/nccl-list-resolver.js';
import { context, shard } from './engine-fixtures.js';

/*
 * Review engine-fidelity-3, E13: NCCL reads NCCL_IB_HCA and
 * NCCL_SOCKET_IFNAME as prefix lists unless they start with `=`. A node
 * with mlx5_0 … mlx5_11 (eight GPU HCAs and storage NICs numbered on) is
 * read by the real discovery from a sysfs tree; the topology (hgx-h100x8)
 * puts GPUs 2-3 under mlx5_1. What the engine's NCCL takes is worked out
 * with NCCL's own rule (test/helpers/nccl-list-resolver.ts).
 */

let sysfsRoot: string;
let inventory: Inventory;
let ports: ReturnType<typeof sysfsHcaPorts>;

beforeAll(async () => {
  sysfsRoot = mkdtempSync(join(tmpdir(), 'llmgw-nccl-sysfs-'));
  for (let i = 0; i <= 11; i++) {
    const port = join(sysfsRoot, 'sys/class/infiniband', `mlx5_${i}`, 'ports/1');
    mkdirSync(port, { recursive: true });
    writeFileSync(join(port, 'state'), '4: ACTIVE\n');
    writeFileSync(join(port, 'phys_state'), '5: LinkUp\n');
    writeFileSync(join(port, 'rate'), '400 Gb/sec (4X NDR)\n');
  }
  vi.stubEnv('LLMGW_FAKE_GPUS', 'hgx-h100x8');
  inventory = await discover({ nvidiaSmi: FAKE_NVIDIA_SMI, sysfsRoot, timeoutMs: 20_000, fabrics: [] });
  ports = sysfsHcaPorts(sysfsRoot);
}, 30_000);
afterAll(() => {
  vi.unstubAllEnvs();
  rmSync(sysfsRoot, { recursive: true, force: true });
});

const twoNodes = { nnodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500 };

async function envOf(engine: VllmEngine | SglangEngine, spec: ReturnType<typeof shard>): Promise<Record<string, string>> {
  const ctx: ValidationContext = { ...context(), inventory };
  await engine.validate(spec, ctx);
  return engine.command(spec).env;
}

describe('NCCL_IB_HCA as NCCL reads it, on a node with mlx5_0 … mlx5_11', () => {
  it('the resolver follows NCCL: a plain mlx5_1 (what the agent emitted) also takes mlx5_10 and mlx5_11', () => {
    expect(ports.map((p) => p.name)).toEqual([...Array(12).keys()].map((i) => `mlx5_${i}`).sort());
    expect(ncclSelects('mlx5_1', ports)).toEqual(['mlx5_1:1', 'mlx5_10:1', 'mlx5_11:1']);
    expect(ncclSelects('=mlx5_1', ports)).toEqual(['mlx5_1:1']);
    expect(ncclSelects('=mlx5_1:2', ports)).toEqual([]);
    expect(ncclSelects('^=mlx5_1', ports)).toHaveLength(11);
  });

  it('a multi-node rank the agent puts on mlx5_1 gets exactly mlx5_1, on the port it checked ACTIVE, as UCX does', async () => {
    const env = await envOf(new VllmEngine({ command: [process.execPath] }, 'eth0'), shard({ ...twoNodes, gpuIndices: [2, 3], profile: { tensorParallelSize: 4 } }));
    expect(env).toMatchObject({ NCCL_IB_HCA: '=mlx5_1:1', UCX_NET_DEVICES: 'mlx5_1:1' });
    expect(ncclSelects(env.NCCL_IB_HCA, ports)).toEqual(['mlx5_1:1']);
  });

  it('HCAs the control plane names, with or without a port, are taken exactly (SGLang as vLLM)', async () => {
    const named = await envOf(new SglangEngine({ command: [process.execPath] }, 'eth0'), shard({ ...twoNodes, gpuIndices: [0, 1], hcas: ['mlx5_1:1'], profile: { engine: 'sglang', tensorParallelSize: 4 } }));
    expect(ncclSelects(named.NCCL_IB_HCA, ports)).toEqual(['mlx5_1:1']);
    expect(named.UCX_NET_DEVICES).toBe('mlx5_1:1');
    // One node: no fabric is chosen, but named HCAs still reach NCCL, exactly.
    const oneNode = await envOf(new VllmEngine({ command: [process.execPath] }, 'eth0'), shard({ gpuIndices: [2, 3], hcas: ['mlx5_1'] }));
    expect(ncclSelects(oneNode.NCCL_IB_HCA, ports)).toEqual(['mlx5_1:1']);
  });

  it("keeps the operator's own NCCL_IB_HCA (engines.<name>.env) as written: it wins, as before", async () => {
    const env = await envOf(
      new VllmEngine({ command: [process.execPath], env: { NCCL_IB_HCA: 'mlx5_1' } }, 'eth0'),
      shard({ ...twoNodes, gpuIndices: [2, 3], profile: { tensorParallelSize: 4 } }),
    );
    expect(env.NCCL_IB_HCA).toBe('mlx5_1');
  });
});

describe('NCCL_SOCKET_IFNAME as NCCL reads it', () => {
  const interfaces = ['eth0', 'eth0.100', 'eth1'].map((name) => ({ name, port: -1 }));

  it('is exactly mgmt_interface: a plain eth0 also takes eth0.100', async () => {
    expect(ncclSelects('eth0', interfaces)).toEqual(['eth0', 'eth0.100']);
    const env = await envOf(new VllmEngine({ command: [process.execPath] }, 'eth0'), shard({ gpuIndices: [2, 3] }));
    expect(ncclSelects(env.NCCL_SOCKET_IFNAME, interfaces)).toEqual(['eth0']);
    // Gloo is not NCCL: it takes the name as given.
    expect(env.GLOO_SOCKET_IFNAME).toBe('eth0');
  });

  it("keeps the operator's own value as written", async () => {
    const env = await envOf(new VllmEngine({ command: [process.execPath], env: { NCCL_SOCKET_IFNAME: 'eth' } }, 'eth0'), shard({ gpuIndices: [2, 3] }));
    expect(env.NCCL_SOCKET_IFNAME).toBe('eth');
  });
});
