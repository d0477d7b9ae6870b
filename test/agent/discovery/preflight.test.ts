import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { failedChecksFix } from '../../../src/agent/discovery/discover-report.js';
import { runPreflight } from '../../../src/agent/discovery/preflight.js';
import { EngineRegistry } from '../../../src/agent/engines/engine-registry.js';
import type { EngineConfig } from '../../../src/agent/config/agent-config.js';
import { GpuProcessSchema, GpuSchema, HcaSchema, InventorySchema, NetInterfaceSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

const inventory = () =>
  create(InventorySchema, {
    driverVersion: '550.54.15',
    cudaVersion: '12.4',
    gpus: [0, 1].map((i) => create(GpuSchema, { index: i, uuid: `GPU-${i}`, healthy: true })),
    hcas: [
      create(HcaSchema, { name: 'mlx5_0', port: 1, state: 'ACTIVE', rateGbps: 400, linkLayer: 'InfiniBand' }),
      create(HcaSchema, { name: 'mlx5_1', port: 1, state: 'DOWN', physState: 'Disabled' }),
    ],
    interfaces: [create(NetInterfaceSchema, { name: 'eth0', addresses: ['10.0.0.5/24', 'fe80::1/64'] }), create(NetInterfaceSchema, { name: 'eth1', addresses: ['fe80::2/64'] })],
  });
const engineConfig = (o: Partial<EngineConfig>): EngineConfig => ({ command: [], env: {}, extraArgs: [], allowedEnv: [], enabled: true, ...o });
const byName = (checks: { name: string; ok: boolean; detail: string }[]) => Object.fromEntries(checks.map((c) => [c.name, c]));

describe('runPreflight', () => {
  it('passes a node that has everything its config asks for', () => {
    const checks = runPreflight(inventory(), { fabrics: [{ hca: 'mlx5_0', fabric: 'ib-a' }], mgmtInterface: 'eth0' });
    expect(checks.map((c) => [c.name, c.ok])).toEqual([
      ['driver', true],
      ['gpu-health', true],
      ['foreign-processes', true],
      ['foreign-memory', true],
      ['fabric ib-a', true],
      ['mgmt-interface', true],
    ]);
    expect(byName(checks)['mgmt-interface']?.detail).toBe('eth0 10.0.0.5/24');
  });

  it('fails the driver and GPU checks on a node without a driver, quoting why', () => {
    const inv = create(InventorySchema, { warnings: ['no NVIDIA driver: nvidia-smi not found'] });
    const c = byName(runPreflight(inv, { fabrics: [], mgmtInterface: '' }));
    expect(c.driver).toEqual({ name: 'driver', ok: false, detail: 'no NVIDIA driver: nvidia-smi not found' });
    expect(c['gpu-health']?.ok).toBe(false);
    expect(c['mgmt-interface']).toBeUndefined();
  });

  it('does not call a GPU with foreign memory healthy beside the foreign-memory failure: it names it (walkthrough 4, O10)', () => {
    const inv = inventory();
    Object.assign(inv.gpus[1] as object, { memoryTotalMb: 81559, memoryUsedMb: 71480 });
    const c = byName(runPreflight(inv, { fabrics: [], mgmtInterface: '' }));
    expect(c['foreign-memory']?.ok).toBe(false);
    expect(c['gpu-health']).toEqual({ name: 'gpu-health', ok: true, detail: 'all 2 GPUs free of hardware faults; GPU 1 takes no shard all the same (see foreign-memory)' });
    // Look-alike: no foreign memory, nothing named.
    expect(byName(runPreflight(inventory(), { fabrics: [], mgmtInterface: '' }))['gpu-health']?.detail).toBe('all 2 GPUs free of hardware faults');
  });

  it('names an unhealthy GPU and its reason', () => {
    const inv = inventory();
    Object.assign(inv.gpus[1] as object, { healthy: false, error: 'GPU requires reset' });
    expect(byName(runPreflight(inv, { fabrics: [], mgmtInterface: '' }))['gpu-health']).toMatchObject({
      ok: false,
      detail: expect.stringContaining('GPU 1: GPU requires reset'),
    });
  });

  it('names a foreign compute process, and accepts the ones shards own', () => {
    const inv = inventory();
    inv.processes = [create(GpuProcessSchema, { pid: 4242, gpuUuid: 'GPU-1', usedMemoryMb: 10240, processName: 'python3' })];
    expect(byName(runPreflight(inv, { fabrics: [], mgmtInterface: '' }))['foreign-processes']).toMatchObject({
      ok: false,
      detail: expect.stringContaining('pid 4242 (python3) holds 10240 MB on GPU 1'),
    });
    expect(byName(runPreflight(inv, { fabrics: [], mgmtInterface: '', ownedPids: new Set([4242]) }))['foreign-processes']?.ok).toBe(true);
  });

  it('fails a fabric whose HCA is missing or not ACTIVE', () => {
    const c = byName(runPreflight(inventory(), { fabrics: [{ hca: 'mlx5_1', fabric: 'ib-b' }, { hca: 'mlx5_7', fabric: 'ib-c' }], mgmtInterface: '' }));
    expect(c['fabric ib-b']).toMatchObject({ ok: false, detail: expect.stringContaining('mlx5_1 is not ACTIVE: port 1 DOWN (Disabled)') });
    expect(c['fabric ib-c']).toMatchObject({ ok: false, detail: 'HCA mlx5_7 not found (HCAs here: mlx5_0, mlx5_1)' });
  });

  it('fails a management interface that is missing or has no IPv4 address', () => {
    expect(byName(runPreflight(inventory(), { fabrics: [], mgmtInterface: 'eth1' }))['mgmt-interface']).toMatchObject({
      ok: false,
      detail: 'eth1 has no IPv4 address; NCCL and Gloo bootstrap over it',
    });
    expect(byName(runPreflight(inventory(), { fabrics: [], mgmtInterface: 'bond0' }))['mgmt-interface']?.detail).toMatch(/^bond0 not found/);
  });

  it("checks each engine's executable (walkthrough 4, O10): a bare name found on PATH and an absolute file pass, each absent one fails naming how to fix it", () => {
    const engines = new EngineRegistry({
      engines: { vllm: engineConfig({ command: ['sh', '-c'] }), sglang: engineConfig({ command: ['no-such-engine-llmgw'] }), sim: engineConfig({ enabled: true }) },
      mgmtInterface: 'lo',
    });
    const found = engines.executables();
    expect(found.map((e) => e.engine)).toEqual(['vllm', 'sglang', 'sim']);
    const checks = byName(runPreflight(inventory(), { fabrics: [], mgmtInterface: '', engineExecutables: found }));
    expect(checks['engine-command vllm']).toMatchObject({ ok: true, detail: expect.stringMatching(/^sh → \/.*\/sh$/) });
    expect(checks['engine-command sglang']).toEqual({
      name: 'engine-command sglang',
      ok: false,
      detail: '"no-such-engine-llmgw" is not found on this PATH (the agent\'s may differ: systemd\'s); every start of sglang would fail',
    });
    // The sim runs on this Node: its executable is an absolute path, shown as it is.
    expect(checks['engine-command sim']).toMatchObject({ ok: true, detail: process.execPath });
    const absent = runPreflight(inventory(), { fabrics: [], mgmtInterface: '', engineExecutables: [{ engine: 'vllm', command: '/opt/vllm/bin/vllm', path: undefined }] });
    expect(absent.at(-1)?.detail).toBe('"/opt/vllm/bin/vllm" is not an executable file; every start of vllm would fail');
    expect(failedChecksFix(['engine-command vllm'])).toBe('install vllm or set engines.vllm.command (engines.vllm.enabled: false on a node that does not run it) (each FAIL line of the report says where)');
  });
});
