import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { discover } from '../../../src/agent/discovery/discover.js';
import { FAKE_NVIDIA_SMI, processesWithEnvMarker, SYSFS_FIXTURE } from '../../helpers/fake-gpus.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-discover-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

const run = (dataset: string, extra: Partial<Parameters<typeof discover>[0]> = {}) => {
  vi.stubEnv('LLMGW_FAKE_GPUS', dataset);
  return discover({ nvidiaSmi: FAKE_NVIDIA_SMI, sysfsRoot: SYSFS_FIXTURE, timeoutMs: 20_000, fabrics: [{ hca: 'mlx5_0', fabric: 'ib-a' }], ...extra });
};

describe('discover', () => {
  it('reads the 8-GPU NVSwitch box: GPUs, NUMA, links, HCAs, versions, processes', async () => {
    const procs = join(tmp, 'procs');
    writeFileSync(procs, '4242,GPU-3f1c0a5e-8b2d-4c7a-9e61-000000000003,71478,/opt/venv/bin/python3\n');
    vi.stubEnv('LLMGW_FAKE_GPU_PROCS', procs);
    const inv = await run('hgx-h100x8');
    expect(inv.warnings).toEqual([]);
    expect(inv.driverVersion).toBe('550.54.15');
    expect(inv.cudaVersion).toBe('12.4');
    expect(inv.gpus.map((g) => [g.index, g.memoryUsedMb, g.numaNode, g.healthy])).toEqual(
      [0, 1, 52, 71480, 71480, 3, 0, 17].map((mb, i) => [i, mb, i < 4 ? 0 : 1, true]),
    );
    expect(inv.links.filter((l) => l.b.startsWith('GPU') && l.connection === 'NV18')).toHaveLength(28);
    expect(inv.hcas.map((h) => [h.name, h.state, h.rateGbps, h.linkLayer, h.fabric, h.numaNode, h.netdev])).toEqual([
      ['mlx5_0', 'ACTIVE', 400, 'InfiniBand', 'ib-a', 0, 'ib0'],
      ['mlx5_1', 'ACTIVE', 400, 'InfiniBand', '', 0, ''],
      ['mlx5_2', 'ACTIVE', 200, 'Ethernet', '', 1, 'ens21np0'],
      ['mlx5_3', 'DOWN', 10, 'InfiniBand', '', -1, ''],
    ]);
    expect(inv.processes.map((p) => [p.pid, p.gpuUuid, p.usedMemoryMb, p.processName])).toEqual([
      [4242, 'GPU-3f1c0a5e-8b2d-4c7a-9e61-000000000003', 71478, '/opt/venv/bin/python3'],
    ]);
    expect(inv.hostname).not.toBe('');
    expect(inv.interfaces.find((i) => i.name === 'lo')?.addresses).toContain('127.0.0.1/8');
    expect(inv.interfaces.find((i) => i.name === 'ib0')).toMatchObject({ up: true, mtu: 4092, addresses: [] });
  });

  it('reports MIG mode and devices', async () => {
    const inv = await run('a100-mig');
    expect(inv.gpus.map((g) => [g.migMode, g.migDevices.map((m) => m.profile)])).toEqual([
      ['Enabled', ['3g.40gb', '2g.20gb', '1g.10gb']],
      ['Disabled', []],
    ]);
  });

  it('keeps faulty GPUs and says topology is unavailable when topo -m exits 255', async () => {
    const inv = await run('fault');
    expect(inv.gpus.map((g) => [g.index, g.healthy, g.error])).toEqual([
      [0, true, ''],
      [1, true, ''],
      [2, false, 'GPU requires reset'],
      [3, false, 'Unknown Error'],
    ]);
    expect(inv.links).toEqual([]);
    expect(inv.warnings).toEqual([expect.stringMatching(/^topology unavailable: nvidia-smi topo -m exited with 255: Unable to determine/)]);
  });

  it('falls back without compute_cap on an old driver, with a warning, and reads CUDA from the banner', async () => {
    const inv = await run('old-driver');
    expect(inv.gpus.map((g) => [g.name, g.computeCapability, g.memoryTotalMb])).toEqual([
      ['Tesla V100-SXM2-32GB', '', 32510],
      ['Tesla V100-SXM2-32GB', '', 32510],
    ]);
    expect(inv.cudaVersion).toBe('11.4');
    expect(inv.warnings).toEqual([expect.stringContaining('too old to report compute_cap')]);
  });

  it('says there is no NVIDIA driver when nvidia-smi does not exist', async () => {
    const inv = await run('hgx-h100x8', { nvidiaSmi: join(tmp, 'no-such-nvidia-smi') });
    expect(inv.gpus).toEqual([]);
    expect(inv.warnings).toEqual([`no NVIDIA driver: nvidia-smi (${join(tmp, 'no-such-nvidia-smi')}) not found`]);
    expect(inv.hcas).toHaveLength(4);
  });

  it('says why when nvidia-smi cannot talk to the driver', async () => {
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_EXIT', '9');
    const inv = await run('hgx-h100x8');
    expect(inv.gpus).toEqual([]);
    expect(inv.warnings).toEqual([expect.stringMatching(/^no NVIDIA driver: nvidia-smi --query-gpu=… --format=csv,noheader,nounits exited with 9: NVIDIA-SMI has failed/)]);
  });

  it('gives up on a hung nvidia-smi at its timeout with a warning and leaves no process behind', async () => {
    const marker = `LLMGW_TEST_MARK_${randomUUID()}`;
    vi.stubEnv(marker, '1');
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_SLEEP', '600');
    const inv = await run('hgx-h100x8', { timeoutMs: 1500 });
    expect(inv.gpus).toEqual([]);
    expect(inv.warnings).toEqual([
      'GPUs unavailable: nvidia-smi --query-gpu=… --format=csv,noheader,nounits did not answer within 1.5s; the driver may be hung',
    ]);
    expect(processesWithEnvMarker(marker)).toEqual([]);
  });

  it('stops at once when aborted', async () => {
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_SLEEP', '600');
    const ac = new AbortController();
    const p = run('hgx-h100x8', { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('shutting down')), 300);
    await expect(p).rejects.toThrow('shutting down');
  });
});
