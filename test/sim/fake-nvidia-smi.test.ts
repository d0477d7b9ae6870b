import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { isRunning, until } from '../helpers/engine-processes.js';
import { FAKE_NVIDIA_SMI, gpuFixture } from '../helpers/fake-gpus.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-fake-smi-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A process's command line, its arguments joined by spaces; '' once it is gone. */
function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((a) => a !== '').join(' ');
  } catch {
    return '';
  }
}

const smi = (args: string[], env: Record<string, string> = {}) =>
  execa(FAKE_NVIDIA_SMI, args, { reject: false, timeout: 20_000, stripFinalNewline: false, env: { LLMGW_FAKE_GPUS: '', ...env } });

describe('bin/fake-nvidia-smi', () => {
  it('answers any field list in the order asked, without header and units', async () => {
    const r = await smi(['--query-gpu=memory.used,index,name', '--format=csv,noheader,nounits'], { LLMGW_FAKE_GPUS: 'pcie-l40sx4' });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('0, 0, NVIDIA L40S\n412, 1, NVIDIA L40S\n0, 2, NVIDIA L40S\n0, 3, NVIDIA L40S\n');
  });

  it('prints the header with units for --format=csv', async () => {
    const r = await smi(['--query-gpu=index,memory.total', '--format=csv']);
    expect(r.stdout.split('\n').slice(0, 2)).toEqual(['index, memory.total [MiB]', '0, 81559 MiB']);
  });

  it('repeats a query every --loop-ms until its reader goes away, as SIGPIPE ends nvidia-smi', async () => {
    const sub = execa(FAKE_NVIDIA_SMI, ['--query-gpu=index', '--format=csv,noheader', '--loop-ms=50'], {
      reject: false,
      timeout: 20_000,
      env: { LLMGW_FAKE_GPUS: 'pcie-l40sx4' },
    });
    let seen = '';
    await new Promise<void>((resolve) => {
      sub.stdout.on('data', (d: Buffer) => {
        seen += d.toString();
        if (seen.split('\n').length > 8) resolve();
      });
    });
    expect(seen.startsWith('0\n1\n2\n3\n0\n1\n2\n3\n')).toBe(true);
    sub.stdout.destroy();
    const r = await sub;
    expect(r.exitCode).toBe(141);
  });

  it('takes the loop interval in every spelling nvidia-smi does, and refuses one it cannot read', async () => {
    // Each spelling repeats -L: 4 lines a round, so a second round (more than 4 lines) from a process
    // still running is a loop. Waited for, not timed: on a loaded machine a round may come late.
    const spellings = [['-l', '1'], ['--loop=1'], ['-lms', '100'], ['--loop-ms=100']];
    const looped = (loop: string[]) =>
      new Promise<{ lines: number; running: boolean }>((resolve) => {
        const sub = execa(FAKE_NVIDIA_SMI, ['-L', ...loop], { reject: false, timeout: 30_000, env: { LLMGW_FAKE_GPUS: 'pcie-l40sx4' } });
        let out = '';
        sub.stdout?.on('data', (d: Buffer) => {
          out += d.toString();
          const lines = out.split('\n').filter((l) => l !== '').length;
          if (lines > 4 && sub.exitCode === null) {
            resolve({ lines, running: true });
            sub.kill('SIGTERM');
          }
        });
        void sub.then(() => resolve({ lines: out.split('\n').filter((l) => l !== '').length, running: false }));
      });
    const runs = await Promise.all(spellings.map(looped));
    for (const [i, r] of runs.entries()) {
      expect(r, spellings[i]?.join(' ')).toMatchObject({ running: true });
      expect(r.lines, spellings[i]?.join(' ')).toBeGreaterThan(4);
    }
    for (const loop of [['--loop=abc'], ['-lms', '0'], ['-l']]) {
      const r = await smi(['-L', ...loop]);
      expect(r.exitCode, loop.join(' ')).toBe(2);
      expect(r.stdout).toMatch(/^Invalid combination of input arguments/);
    }
  });

  it('stops with its sleep when told to, leaving no process behind', async () => {
    const sub = execa(FAKE_NVIDIA_SMI, ['-L'], { reject: false, timeout: 20_000, env: { LLMGW_FAKE_NVIDIA_SMI_SLEEP: '3600' } });
    // The script's own sleep, once it has exec'd: told to stop before that, there is no sleep to end and the test proves nothing.
    let sleeper: number | undefined;
    await until(async () => {
      const children = (await execa('pgrep', ['-P', String(sub.pid)], { reject: false })).stdout.split('\n').filter((l) => l !== '').map(Number);
      sleeper = children.find((pid) => cmdline(pid) === 'sleep 3600');
      return sleeper !== undefined;
    }, 'the script to start its sleep');
    sub.kill('SIGTERM');
    const r = await sub;
    expect(r.exitCode).toBe(143);
    // That sleep, not any 'sleep 3600' on the machine (another test's may be running); a zombie is gone.
    await until(() => !isRunning(sleeper as number), 'the sleep to end', 5_000);
  });

  it('refuses compute_cap on the old driver the way nvidia-smi does', async () => {
    const r = await smi(['--query-gpu=index,compute_cap', '--format=csv,noheader,nounits'], { LLMGW_FAKE_GPUS: 'old-driver' });
    expect(r.exitCode).toBe(2);
    expect(r.stdout).toBe('Field "compute_cap" is not a valid field to query.\n\n');
  });

  it('answers -L and topo -m from the data set', async () => {
    expect((await smi(['-L'], { LLMGW_FAKE_GPUS: 'a100-mig' })).stdout).toBe(gpuFixture('a100-mig', 'list-L.txt'));
    expect((await smi(['topo', '-m'])).stdout).toBe(gpuFixture('hgx-h100x8', 'topo-m.txt'));
    const failed = await smi(['topo', '-m'], { LLMGW_FAKE_GPUS: 'fault' });
    expect(failed.exitCode).toBe(255);
  });

  it('lists compute processes from LLMGW_FAKE_GPU_PROCS, and none without it', async () => {
    const procs = join(tmp, 'procs');
    writeFileSync(procs, '4242,GPU-9a7e55c2-1d04-4b8e-a3f0-000000000001,412,python3\n');
    const args = ['--query-compute-apps=pid,gpu_uuid,used_memory,process_name', '--format=csv,noheader,nounits'];
    expect((await smi(args, { LLMGW_FAKE_GPUS: 'pcie-l40sx4', LLMGW_FAKE_GPU_PROCS: procs })).stdout).toBe(
      '4242, GPU-9a7e55c2-1d04-4b8e-a3f0-000000000001, 412, python3\n',
    );
    expect((await smi(args, { LLMGW_FAKE_GPUS: 'pcie-l40sx4' })).stdout).toBe('');
  });

  it('fails every call with LLMGW_FAKE_NVIDIA_SMI_EXIT, and takes a data set by absolute path', async () => {
    const r = await smi(['-L'], { LLMGW_FAKE_NVIDIA_SMI_EXIT: '9' });
    expect(r.exitCode).toBe(9);
    expect(r.stdout).toContain("couldn't communicate with the NVIDIA driver");
    const missing = await smi(['-L'], { LLMGW_FAKE_GPUS: join(tmp, 'nothing-here') });
    expect([missing.exitCode, missing.stdout]).toEqual([6, 'No devices were found\n']);
  });

  it('names the data sets there are for an LLMGW_FAKE_GPUS that is none of them', async () => {
    const r = await smi(['--query-gpu=index', '--format=csv'], { LLMGW_FAKE_GPUS: 'hgx-h100x16' });
    expect(r.exitCode).toBe(6);
    expect(r.stdout).toBe(
      'No devices were found (fake nvidia-smi: LLMGW_FAKE_GPUS=hgx-h100x16 is no data set; known: a100-mig, fault, hgx-h100x8, old-driver, pcie-l40sx4, or an absolute directory)\n',
    );
  });
});
