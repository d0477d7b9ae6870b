import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FAKE_NVIDIA_SMI, GPU_FIXTURES, gpuFixture, SYSFS_FIXTURE } from '../helpers/fake-gpus.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';
import { buildFakeNvml, fakeNvmlUnavailable } from '../agent/discovery/fake-nvml.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-discover-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const fake = ['--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', SYSFS_FIXTURE];
// biome-ignore lint/suspicious/noControlCharactersInRegex: looking for escape codes is the point
const ESCAPE = /\u001b/;

describe('llmgw discover', () => {
  it("shows the rates the agent measured, from its state dir, and none where it measured nothing (issue 52)", async () => {
    const stateDir = mkdtempSync(join(tmp, 'state-'));
    const MiB = 1024 * 1024;
    writeFileSync(join(stateDir, 'warmth.json'), JSON.stringify({ version: 1, entries: [], rates: { disk: { bytes: 512 * MiB, ms: 1000, atMs: Date.now() - 60_000 } } }));
    const env = { LLMGW_FAKE_GPUS: 'hgx-h100x8', LLMGW_SUPERVISOR_STATE_DIR: stateDir, NO_COLOR: '' };
    // Its look-alike: an agent that kept no rates (or a state dir discover cannot read).
    const none = { ...env, LLMGW_SUPERVISOR_STATE_DIR: mkdtempSync(join(tmp, 'state-')) };
    // The four runs at once: one after another they took 23 s of this test's 30 on a loaded machine.
    const [jsonRun, text, noneJson, noneText] = await Promise.all([
      runCli(['discover', '--json', ...fake], { env }),
      runCli(['discover', ...fake], { env }),
      runCli(['discover', '--json', ...fake], { env: none }),
      runCli(['discover', ...fake], { env: none }),
    ]);
    const json = JSON.parse(jsonRun.stdout);
    expect(json.inventory.rates.diskRead).toMatchObject({ bytesPerSecond: 512 * MiB, bytes: String(512 * MiB), source: 'warm' });
    expect(json.inventory.rates.diskWrite).toBeUndefined();
    expect(text.stdout).toMatch(/^Measured rates: disk write not measured, disk read 512 MiB\/s \(warm, 1m[0-9s]* ago\), last pull not measured$/m);
    expect(JSON.parse(noneJson.stdout).inventory.rates).toBeUndefined();
    expect(noneText.stdout).not.toMatch(/Measured rates/);
  });

  it('finishes on a machine without a driver, says so, and exits 0', async () => {
    const r = await runCli(['discover', '--nvidia-smi', join(tmp, 'absent-nvidia-smi')]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain('no NVIDIA driver');
    expect(r.stdout).toContain('GPUs: none');
    // Progress marks it failed, not done, and says why once; the other probes still ran.
    expect(r.stderr).toMatch(/^✖ GPUs: none \[FAILED: no NVIDIA driver: /m);
    expect(r.stderr).not.toMatch(/^✔ GPUs/m);
    expect(r.stderr).toMatch(/^↓ Topology \(nvidia-smi topo -m\) \[SKIPPED: no GPUs\]$/m);
    expect(r.stderr).toMatch(/^✔ Network: \d+ interfaces$/m);
  });

  it('exits 1 with --strict when there is no driver, naming the failed checks', async () => {
    const r = await runCli(['discover', '--strict', '--nvidia-smi', join(tmp, 'absent-nvidia-smi')]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr.trim().split('\n').at(-1)).toBe(
      'error: preflight failed: driver, gpu-health; install or repair the NVIDIA driver until nvidia-smi lists the GPUs; reset the unhealthy GPUs or drain the node (each FAIL line of the report says where)',
    );
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
        // topo -m's CPU Affinity column: what a multi-node rank on the GPU is pinned to.
        cpuAffinity: Number(index) < 4 ? '0-55,112-167' : '56-111,168-223',
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
    // Sound hardware no shard would start on is not "ok" here either (walkthrough 3, item 5: the table said ok, preflight FAIL).
    expect(r.stdout).toMatch(/^3\s+NVIDIA H100 80GB HBM3\s+.*foreign memory \d+% \(no shard starts on it\)/m);
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
        // Who the engines run as is a check too; both may here (see the engine-account test).
        // Their executables are checked too: vllm's is the double, sglang's is absent (walkthrough 4, O10).
        'engines:',
        `  vllm: {user: nobody, command: [${join(REPO_ROOT, 'bin/fake-vllm')}, serve]}`,
        '  sglang: {allow_root: true, command: [/nonexistent/sglang-launch]}',
        '',
      ].join('\n'),
    );
    const r = await runCli(['discover', '--config', config, '--strict', '--json'], { env: { LLMGW_FAKE_GPUS: 'fault' } });
    expect(r.exitCode).toBe(1);
    // A failed --strict is an error like any other (BaseCommand.catch): the report is in its details.
    const { kind, message, inventory, checks } = JSON.parse(r.stdout).error;
    expect(kind).toBe('failure');
    expect(message).toMatch(/^preflight failed: gpu-health, fabric ib-b, engine-command sglang; reset the unhealthy GPUs or drain the node; bring fabric ib-b's HCA up .*; install sglang or set engines\.sglang\.command \(engines\.sglang\.enabled: false on a node that does not run it\)/);
    expect(inventory.hcas.find((h: { name: string }) => h.name === 'mlx5_0').fabric).toBe('ib-a');
    expect(checks.map((c: { name: string; ok: boolean }) => [c.name, c.ok])).toEqual([
      ['driver', true],
      ['gpu-health', false],
      ['foreign-processes', true],
      ['foreign-memory', true],
      ['fabric ib-a', true],
      ['fabric ib-b', false],
      ['mgmt-interface', true],
      ['engine-account vllm', true],
      ['engine-account sglang', true],
      ['engine-command vllm', true],
      ['engine-command sglang', false],
    ]);
    expect(checks.find((c: { name: string }) => c.name === 'engine-command vllm').detail).toBe(join(REPO_ROOT, 'bin/fake-vllm'));
    expect(checks.find((c: { name: string }) => c.name === 'engine-command sglang').detail).toBe('"/nonexistent/sglang-launch" is not an executable file; every start of sglang would fail');
    const text = await runCli(['discover', '--config', config], { env: { LLMGW_FAKE_GPUS: 'fault' } });
    expect(text.exitCode).toBe(0);
    expect(text.stdout).toMatch(/^FAIL\s+gpu-health\s+GPU 2: GPU requires reset; GPU 3: Unknown Error/m);
    expect(text.stdout).toContain('topology unavailable: nvidia-smi topo -m exited with 255');
  });

  // As root, as the agent runs: only a root agent refuses an engine for its account.
  it.skipIf(process.getuid?.() !== 0)('says with --config which account each engine runs as, and fails --strict for one a root agent refuses (security review 2, N1)', async () => {
    const config = join(tmp, 'accounts.yaml');
    writeFileSync(
      config,
      ['node_id: n1', 'server: http://127.0.0.1:1', 'mgmt_interface: lo', 'discovery:', `  nvidia_smi: ${FAKE_NVIDIA_SMI}`, `  sysfs_root: ${SYSFS_FIXTURE}`, '  foreign_memory_share: 100%', 'engines:', `  vllm: {user: nobody, command: [${join(REPO_ROOT, 'bin/fake-vllm')}, serve]}`, '  sglang: {command: [/bin/sh]}', '  sim: {enabled: true, allow_root: true}', ''].join('\n'),
    );
    const r = await runCli(['discover', '--config', config, '--strict', '--json']);
    expect(r.exitCode).toBe(1);
    const { message, checks } = JSON.parse(r.stdout).error;
    expect(message).toMatch(/^preflight failed: engine-account sglang; set engines\.sglang\.user to an account for it \(or allow_root: true\)/);
    expect(checks.filter((c: { name: string }) => c.name.startsWith('engine-account'))).toEqual([
      { name: 'engine-account vllm', ok: true, detail: 'vllm → nobody (uid 65534)' },
      { name: 'engine-account sglang', ok: false, detail: 'sglang → root: refused; set engines.sglang.user to an unprivileged account (or engines.sglang.allow_root: true)' },
      { name: 'engine-account sim', ok: true, detail: 'sim → root (allow_root)' },
    ]);
    const text = await runCli(['discover', '--config', config]);
    expect(text.stdout).toMatch(/^ok\s+engine-account vllm\s+vllm → nobody \(uid 65534\)$/m);
    expect(text.stdout).toMatch(/^FAIL\s+engine-account sglang\s+sglang → root: refused; set engines\.sglang\.user/m);
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

/**
 * Fields only nvidia-smi gives: `migMode` (no entry point of the set llmgw
 * uses reads MIG mode) and a process's `processName` (NVML names no
 * process: llmgw reads /proc, where the fake's pids are not). Every other
 * field must be equal, whichever source read it.
 */
function withoutSmiOnlyFields(report: { inventory: { gpus: { migMode?: string }[]; processes: { processName?: string }[] } }) {
  for (const g of report.inventory.gpus) delete g.migMode;
  for (const p of report.inventory.processes) delete p.processName;
  return report;
}

describe.skipIf(fakeNvmlUnavailable() !== undefined)('llmgw discover through NVML', () => {
  const nvmlEnv = (extra: Record<string, string> = {}) => ({ LLMGW_DISCOVERY_NVML_LIBRARY: buildFakeNvml(), ...extra });

  it.each(['hgx-h100x8', 'pcie-l40sx4', 'a100-mig'])('gives the same --json as nvidia-smi on %s, field for field', async (dataset) => {
    const procs = join(tmp, `procs-${dataset}`);
    const uuid = gpuFixture(dataset, 'query-gpu.csv').split('\n')[1]?.split(', ')[1];
    writeFileSync(procs, `4242, ${uuid}, 1024, /usr/bin/python3\n`);
    const env = { LLMGW_FAKE_GPUS: dataset, LLMGW_FAKE_GPU_PROCS: procs };
    const [viaNvml, viaSmi] = await Promise.all([
      runCli(['discover', '--json', ...fake], { env: nvmlEnv(env) }),
      runCli(['discover', '--json', ...fake], { env: { ...env, LLMGW_DISCOVERY_PREFER_NVML: 'false' } }),
    ]);
    expect(viaNvml.exitCode).toBe(0);
    expect(viaSmi.exitCode).toBe(0);
    const nvml = JSON.parse(viaNvml.stdout);
    const smi = JSON.parse(viaSmi.stdout);
    expect(nvml.inventory.gpus.length).toBeGreaterThan(0);
    expect(nvml.inventory.processes).toEqual([expect.objectContaining({ pid: 4242, gpuUuid: uuid, usedMemoryMb: 1024 })]);
    expect(withoutSmiOnlyFields(nvml)).toEqual(withoutSmiOnlyFields(smi));
  });

  it('says which source it used and why', async () => {
    const lib = buildFakeNvml();
    const r = await runCli(['discover', ...fake], { env: nvmlEnv() });
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toContain(`GPUs: 8 found via NVML from ${lib}`);
    const absent = await runCli(['discover', ...fake], { env: { LLMGW_DISCOVERY_NVML_LIBRARY: join(tmp, 'libnvidia-ml.so.1') } });
    expect(absent.stderr).toMatch(/GPUs: 8 found via nvidia-smi: NVML unavailable \(cannot load .*libnvidia-ml\.so\.1.*\); falling back to nvidia-smi/);
  });

  it('reads GPUs through nvidia-smi when the driver\'s NVML lacks the _v2 memory call, and says so', async () => {
    const env = { LLMGW_DISCOVERY_NVML_LIBRARY: buildFakeNvml('old'), LLMGW_FAKE_GPUS: 'old-driver' };
    const [text, json] = await Promise.all([runCli(['discover', ...fake], { env }), runCli(['discover', '--json', ...fake], { env })]);
    expect(text.stderr).toContain('GPUs: 2 found via nvidia-smi: NVML of this driver lacks nvmlDeviceGetMemoryInfo_v2; reading GPUs through nvidia-smi');
    expect(JSON.parse(json.stdout).inventory.gpus.map((g: { memoryTotalMb: number }) => g.memoryTotalMb)).toEqual([32510, 32510]);
  });

  it('falls back to nvidia-smi with one warning when nvmlInit fails', async () => {
    const control = join(tmp, 'init-fails');
    writeFileSync(control, 'init 9\n');
    const r = await runCli(['discover', '--json', ...fake], { env: nvmlEnv({ LLMGW_FAKE_NVML_CONTROL: control }) });
    expect(r.exitCode).toBe(0);
    const { inventory } = JSON.parse(r.stdout);
    expect(inventory.gpus).toHaveLength(8);
    expect(inventory.gpus[0].migMode).toBe('Disabled'); // nvidia-smi's field: the fallback ran
    expect(inventory.warnings).toEqual(['NVML unavailable (nvmlInit_v2 failed: Driver Not Loaded (NVML 9)): GPUs read through nvidia-smi']);
  });

  it('fails --strict preflight on a GPU that NVML reports faulty, with the reason', async () => {
    const control = join(tmp, 'faults');
    writeFileSync(control, 'remap 2 pending\nlost 6\n');
    const r = await runCli(['discover', '--json', '--strict', ...fake], { env: nvmlEnv({ LLMGW_FAKE_NVML_CONTROL: control }) });
    expect(r.exitCode).toBe(1);
    // A failed --strict is an error like any other (BaseCommand.catch): the report is in its details.
    const { inventory, checks } = JSON.parse(r.stdout).error;
    expect(inventory.gpus[2]).toMatchObject({ healthy: false, error: 'row remap pending: a memory row awaits remapping, which needs a GPU reset' });
    expect(inventory.gpus[6]).toMatchObject({ healthy: false, error: expect.stringMatching(/^GPU is lost \(NVML_ERROR_GPU_IS_LOST\)/) });
    const health = checks.find((c: { name: string }) => c.name === 'gpu-health');
    expect(health.ok).toBe(false);
    expect(health.detail).toContain('GPU 2: row remap pending');
    expect(health.detail).toContain('GPU 6: GPU is lost');
  });
});

