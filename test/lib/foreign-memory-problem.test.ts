import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { GpuProcessSchema, GpuSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../../src/lib/foreign-memory-problem.js';
import { FAKE_NVIDIA_SMI, SYSFS_FIXTURE } from '../helpers/fake-gpus.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

const gpu = (index: number, usedMb: number) => create(GpuSchema, { index, uuid: `GPU-${index}`, memoryTotalMb: 81559, memoryUsedMb: usedMb, healthy: true });
const proc = (pid: number, gpuIndex: number, mb: number) => create(GpuProcessSchema, { pid, gpuUuid: `GPU-${gpuIndex}`, usedMemoryMb: mb });

describe('foreignMemoryProblem', () => {
  it('names a GPU whose memory is used with no process listed, with the numbers', () => {
    expect(foreignMemoryProblem(gpu(3, 71480), [], 0.05)).toBe(
      'GPU 3: 71480 of 81559 MiB used and no process listed on it, so 71480 MiB (88%) is used by nothing this node can see, more than the 5% allowed ' +
        '(another container or a leaked CUDA context: find it with nvidia-smi on the host, or free the GPU)',
    );
  });

  it('counts what listed processes hold, on that GPU only', () => {
    // An engine of ours holds 70000 MiB of GPU 3: only 1480 MiB are unexplained.
    expect(foreignMemoryProblem(gpu(3, 71480), [proc(10, 3, 70000)], 0.05)).toBeUndefined();
    // The same process on another GPU explains nothing here.
    expect(foreignMemoryProblem(gpu(3, 71480), [proc(10, 4, 70000)], 0.05)).toMatch(/^GPU 3: .*71480 MiB \(88%\)/);
    expect(foreignMemoryProblem(gpu(3, 71480), [proc(10, 3, 30000)], 0.05)).toMatch(/the processes listed on it hold 30000 MiB, so 41480 MiB \(51%\)/);
  });

  it("leaves an idle GPU's few MiB alone, and follows the share given", () => {
    expect(foreignMemoryProblem(gpu(2, 52), [])).toBeUndefined();
    expect(foreignMemoryProblem(gpu(3, 71480), [], 0.9)).toBeUndefined();
    expect(foreignMemoryProblem(gpu(2, 52), [], 0)).toMatch(/^GPU 2: 52 of 81559 MiB used/);
    expect(DEFAULT_FOREIGN_MEMORY_SHARE).toBeGreaterThan(0);
  });

  it('refuses a share outside 0..1 rather than judging with it', () => {
    expect(() => foreignMemoryProblem(gpu(0, 0), [], 5)).toThrow(/between 0 and 1, got 5/);
    expect(() => foreignMemoryProblem(gpu(0, 0), [], Number.NaN)).toThrow(RangeError);
  });
});

describe('llmgw discover --strict on the fake 8-GPU box', () => {
  it('fails foreign-memory naming GPUs 3 and 4 with their numbers (exit 1)', async () => {
    const r = await runCli(['discover', '--strict', '--json', '--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', SYSFS_FIXTURE], {
      env: { LLMGW_FAKE_GPUS: 'hgx-h100x8' },
    });
    expect(r.exitCode).toBe(1);
    // A failed --strict is an error like any other (BaseCommand.catch): the report is in its details.
    const { message, checks } = JSON.parse(r.stdout).error as { message: string; checks: { name: string; ok: boolean; detail: string }[] };
    expect(message).toBe(
      'preflight failed: foreign-memory; free the GPU memory no process accounts for (another container, a leaked CUDA context), or raise discovery.foreign_memory_share (each FAIL line of the report says where)',
    );
    const check = checks.find((c) => c.name === 'foreign-memory');
    expect(check?.ok).toBe(false);
    expect(check?.detail).toMatch(/^GPU 3: 71480 of 81559 MiB used .*; GPU 4: 71480 of 81559 MiB used /);
    expect(check?.detail).not.toMatch(/GPU [0125-7]:/);
  });
});

describe('discovery.foreign_memory_share', () => {
  function config(share: string): string {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-share-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'agent.yaml');
    // The engines run as root here, as the test does: allowed, so that only foreign memory is judged.
    // Their executables, checked too, are the doubles: this machine has neither engine.
    const engines = ['engines:', `  vllm: {allow_root: true, command: [${join(REPO_ROOT, 'bin/fake-vllm')}, serve]}`, `  sglang: {allow_root: true, command: [${join(REPO_ROOT, 'bin/fake-sglang')}]}`];
    const yaml = ['node_id: n1', 'server: http://127.0.0.1:1', 'mgmt_interface: lo', 'discovery:', `  nvidia_smi: ${FAKE_NVIDIA_SMI}`, `  sysfs_root: ${SYSFS_FIXTURE}`, `  foreign_memory_share: ${share}`, ...engines];
    writeFileSync(path, `${yaml.join('\n')}\n`);
    return path;
  }

  it('lets discover --strict pass GPUs 3 and 4 at 90%, and names them at 5%', async () => {
    const env = { LLMGW_FAKE_GPUS: 'hgx-h100x8' };
    const loose = await runCli(['discover', '--strict', '--json', '--config', config('90%')], { env });
    expect(loose.exitCode, loose.stderr).toBe(0);
    expect(JSON.parse(loose.stdout).checks.find((c: { name: string }) => c.name === 'foreign-memory')).toMatchObject({ ok: true, detail: expect.stringContaining('90%') });
    const strict = await runCli(['discover', '--strict', '--config', config('0.05')], { env });
    expect(strict.exitCode).toBe(1);
    expect(strict.stdout).toMatch(/^FAIL\s+foreign-memory\s+GPU 3: 71480 of 81559 MiB used/m);
  });

  it('refuses a bare number that would mean percent, naming the key and the fix (exit 78)', async () => {
    const r = await runCli(['discover', '--config', config('5')]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toMatch(/discovery\.foreign_memory_share: number 5 is not a share; write it like 5% or 0\.05/);
  });
});
