import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FAKE_NVIDIA_SMI, GPU_FIXTURES, gpuFixture, SYSFS_FIXTURE } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-discover-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const fake = ['--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', SYSFS_FIXTURE];
// biome-ignore lint/suspicious/noControlCharactersInRegex: looking for escape codes is the point
const ESCAPE = /\u001b/;

describe('llmgw discover', () => {
  it('finishes on a machine without a driver, says so, and exits 0', async () => {
    const r = await runCli(['discover', '--nvidia-smi', join(tmp, 'absent-nvidia-smi')]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain('no NVIDIA driver');
    expect(r.stdout).toContain('GPUs: none');
  });

  it('exits 1 with --strict when there is no driver, naming the failed checks', async () => {
    const r = await runCli(['discover', '--strict', '--nvidia-smi', join(tmp, 'absent-nvidia-smi')]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr.trim().split('\n').at(-1)).toBe('error: preflight failed: driver, gpu-health');
  });

  it('prints an Inventory that matches the fixture exactly with --json', async () => {
    const r = await runCli(['discover', '--json', ...fake], { env: { LLMGW_FAKE_GPUS: 'hgx-h100x8' } });
    expect(r.exitCode).toBe(0);
    const { inventory, checks } = JSON.parse(r.stdout);
    expect(checks).toEqual([]);
    expect(inventory.driverVersion).toBe('550.54.15');
    expect(inventory.cudaVersion).toBe('12.4');
    expect(inventory.warnings).toEqual([]);
    const rows = gpuFixture('hgx-h100x8', 'query-gpu.csv').trim().split('\n').slice(1).map((l) => l.split(', '));
    expect(inventory.gpus).toEqual(
      rows.map(([index, uuid, name, bus, total, used, , cc, mig]) => ({
        index: Number(index),
        uuid,
        name,
        computeCapability: cc,
        memoryTotalMb: Number.parseInt(total as string, 10),
        memoryUsedMb: Number.parseInt(used as string, 10),
        pciBusId: bus,
        numaNode: Number(index) < 4 ? 0 : 1,
        healthy: true,
        error: '',
        migMode: mig,
        migDevices: [],
      })),
    );
    const gpuPairs = inventory.links.filter((l: { b: string }) => l.b.startsWith('GPU'));
    expect(gpuPairs).toHaveLength(28);
    expect(gpuPairs).toContainEqual({ a: 'GPU6', b: 'GPU7', connection: 'NV18', nvlinks: 18 });
    expect(inventory.links.filter((l: { connection: string }) => l.connection === 'PXB')).toEqual(
      [0, 1, 2, 3, 4, 5, 6, 7].map((g) => ({ a: `GPU${g}`, b: `mlx5_${g >> 1}`, connection: 'PXB', nvlinks: 0 })),
    );
    expect(inventory.hcas).toEqual([
      { name: 'mlx5_0', port: 1, state: 'ACTIVE', physState: 'LinkUp', rateGbps: 400, linkLayer: 'InfiniBand', numaNode: 0, fabric: '', netdev: 'ib0' },
      { name: 'mlx5_1', port: 1, state: 'ACTIVE', physState: 'LinkUp', rateGbps: 400, linkLayer: 'InfiniBand', numaNode: 0, fabric: '', netdev: '' },
      { name: 'mlx5_2', port: 1, state: 'ACTIVE', physState: 'LinkUp', rateGbps: 200, linkLayer: 'Ethernet', numaNode: 1, fabric: '', netdev: 'ens21np0' },
      { name: 'mlx5_3', port: 1, state: 'DOWN', physState: 'Disabled', rateGbps: 10, linkLayer: 'InfiniBand', numaNode: -1, fabric: '', netdev: '' },
    ]);
  });

  it('prints tables without spinners or colour codes when piped', async () => {
    const r = await runCli(['discover', ...fake], { env: { LLMGW_FAKE_GPUS: 'hgx-h100x8', NO_COLOR: '' } });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).not.toMatch(ESCAPE);
    expect(r.stdout).not.toMatch(/[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏❯]/);
    expect(r.stdout).toMatch(/^7\s+NVIDIA H100 80GB HBM3\s+17 \/ 81559 MiB\s+9\.0\s+1\s+ok\s+off\s+-$/m);
    expect(r.stdout).toContain(
      'Topology: 8 GPUs, all pairs NV18; GPU0-1 nearest HCA mlx5_0 (PXB), GPU2-3 nearest HCA mlx5_1 (PXB), GPU4-5 nearest HCA mlx5_2 (PXB), GPU6-7 nearest HCA mlx5_3 (PXB)',
    );
    expect(r.stdout).toMatch(/^mlx5_2\s+1\s+ACTIVE\s+LinkUp\s+200 Gb\/s\s+Ethernet \(RoCE\)\s+ens21np0\s+-\s+1$/m);
    expect(r.stdout).toMatch(/^Management interface: eth0 /m);
  });

  it('runs preflight from --config and fails --strict on a DOWN fabric port and a faulty GPU', async () => {
    const config = join(tmp, 'agent.yaml');
    writeFileSync(
      config,
      [
        'node_id: n1',
        'server: http://127.0.0.1:1',
        'mgmt_interface: lo',
        'fabrics:',
        '  - {hca: mlx5_0, fabric: ib-a}',
        '  - {hca: mlx5_3, fabric: ib-b}',
        'discovery:',
        `  nvidia_smi: ${FAKE_NVIDIA_SMI}`,
        `  sysfs_root: ${SYSFS_FIXTURE}`,
        '',
      ].join('\n'),
    );
    const r = await runCli(['discover', '--config', config, '--strict', '--json'], { env: { LLMGW_FAKE_GPUS: 'fault' } });
    expect(r.exitCode).toBe(1);
    // A failed --strict is an error like any other (BaseCommand.catch): the report is in its details.
    const { kind, message, inventory, checks } = JSON.parse(r.stdout).error;
    expect([kind, message]).toEqual(['failure', 'preflight failed: gpu-health, fabric ib-b']);
    expect(inventory.hcas.find((h: { name: string }) => h.name === 'mlx5_0').fabric).toBe('ib-a');
    expect(checks.map((c: { name: string; ok: boolean }) => [c.name, c.ok])).toEqual([
      ['driver', true],
      ['gpu-health', false],
      ['foreign-processes', true],
      ['fabric ib-a', true],
      ['fabric ib-b', false],
      ['mgmt-interface', true],
    ]);
    const text = await runCli(['discover', '--config', config], { env: { LLMGW_FAKE_GPUS: 'fault' } });
    expect(text.exitCode).toBe(0);
    expect(text.stdout).toMatch(/^FAIL\s+gpu-health\s+GPU 2: GPU requires reset; GPU 3: Unknown Error/m);
    expect(text.stdout).toContain('topology unavailable: nvidia-smi topo -m exited with 255');
  });

  it('gives up on a hung nvidia-smi at --timeout', async () => {
    const r = await runCli(['discover', '--json', '--timeout', '1s', ...fake], { env: { LLMGW_FAKE_NVIDIA_SMI_SLEEP: '600' } });
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(r.stdout).inventory.warnings).toEqual([expect.stringContaining('did not answer within 1s')]);
  });

  it('refuses a --timeout that is not a duration with exit 2', async () => {
    const r = await runCli(['discover', '--timeout', 'soon']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('--timeout "soon" is not a duration');
  });

  it('refuses --timeout 0s as a duration that must be more than 0, in one line, exit 2', async () => {
    const r = await runCli(['discover', '--timeout', '0s']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe('error: --timeout must be more than 0, got "0s"');
  });

  it('reads data sets by absolute path', async () => {
    const r = await runCli(['discover', '--json', ...fake], { env: { LLMGW_FAKE_GPUS: join(GPU_FIXTURES, 'a100-mig') } });
    expect(JSON.parse(r.stdout).inventory.gpus[0].migDevices).toHaveLength(3);
  });
});
