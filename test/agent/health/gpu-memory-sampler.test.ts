import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { GpuMemorySampler, nextSilenceCheckMs } from '../../../src/agent/health/gpu-memory-sampler.js';
import { NvmlLibrary } from '../../../src/agent/discovery/nvml/nvml-library.js';
import { isRunning } from '../../helpers/engine-processes.js';
import { FAKE_NVIDIA_SMI, GPU_FIXTURES, replaceDataSetFile } from '../../helpers/fake-gpus.js';
import { buildFakeNvml, fakeNvmlUnavailable } from '../discovery/fake-nvml.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-sampler-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

const INTERVAL_MS = 100;
const WAIT = { timeout: 15_000, interval: 20 };

/** Replaces the data set's query-gpu.csv whole (replaceDataSetFile): the loop reads it every interval. */
const setCsv = (dir: string, csv: string) => replaceDataSetFile(join(dir, 'query-gpu.csv'), csv);

/** A data set this test may rewrite, a sampler on it (closed after the test), and a logger whose lines it can read. */
function setup(opts: { timeoutMs?: number; intervalMs?: number; nvidiaSmi?: string; nvmlLibrary?: string } = {}) {
  const dir = mkdtempSync(join(tmp, 'ds-'));
  cpSync(join(GPU_FIXTURES, 'pcie-l40sx4'), dir, { recursive: true });
  vi.stubEnv('LLMGW_FAKE_GPUS', dir);
  let nvml: NvmlLibrary | undefined;
  if (opts.nvmlLibrary !== undefined) {
    const opened = NvmlLibrary.open(opts.nvmlLibrary);
    if (!opened.ok) throw new Error(opened.reason);
    nvml = opened.value;
    onTestFinished(() => nvml?.close());
  }
  const lines: { level: number; msg: string; err?: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  const sampler = new GpuMemorySampler({
    nvidiaSmi: opts.nvidiaSmi ?? FAKE_NVIDIA_SMI,
    intervalMs: opts.intervalMs ?? INTERVAL_MS,
    timeoutMs: opts.timeoutMs ?? 5000,
    nvml,
    logger,
  });
  onTestFinished(() => sampler.close());
  const setUsed = (mb: number[]) => setCsv(dir, `index, memory.used [MiB]\n${mb.map((m, i) => `${i}, ${m} MiB`).join('\n')}\n`);
  const messages = () => lines.map((l) => l.msg);
  return { sampler, lines, messages, setUsed, dir };
}

describe('GpuMemorySampler', () => {
  it('has no reading before start, then one per GPU in order, kept fresh by one long-lived nvidia-smi', async () => {
    const { sampler, setUsed } = setup();
    expect(sampler.latest()).toEqual([]);
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    const pid = sampler.pid;
    expect(pid).toBeGreaterThan(0);
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    setUsed([5, 6, 7, 8]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([5, 6, 7, 8]), WAIT);
    // The same process reported all three: no nvidia-smi per reading.
    expect(sampler.pid).toBe(pid);
  });

  it('start is idempotent and close kills the loop for good', async () => {
    const { sampler } = setup();
    sampler.start();
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toHaveLength(4), WAIT);
    const pid = sampler.pid as number;
    sampler.close();
    await vi.waitFor(() => expect(isRunning(pid)).toBe(false), WAIT);
    expect(sampler.pid).toBeUndefined();
    sampler.start();
    expect(sampler.pid).toBeUndefined();
  });

  it('keeps the last reading while nvidia-smi fails, logs once with the reason, restarts it and logs the recovery', async () => {
    const { sampler, lines, messages, setUsed, dir } = setup();
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    // The driver goes away: the loop exits, and every restart fails the same way.
    rmSync(join(dir, 'query-gpu.csv'));
    await vi.waitFor(() => expect(messages()).toContain('GPU memory readings stopped; heartbeats repeat the last reading until they resume'), WAIT);
    const warning = lines.find((l) => l.msg.startsWith('GPU memory readings stopped'));
    expect(warning?.err).toBe('nvidia-smi exited with code 6: No devices were found');
    await new Promise((r) => setTimeout(r, 5 * INTERVAL_MS));
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
    expect(messages().filter((m) => m.startsWith('GPU memory readings stopped'))).toHaveLength(1);
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    expect(messages()).toContain('GPU memory readings resumed');
  });

  it('kills a loop that goes silent past the timeout and starts a new one', async () => {
    const { sampler, lines } = setup({ timeoutMs: 300 });
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_SLEEP', '600');
    sampler.start();
    const hung = sampler.pid as number;
    await vi.waitFor(() => expect(lines.find((l) => l.msg.startsWith('GPU memory readings stopped'))?.err).toBe('nvidia-smi gave no reading for 400ms'), WAIT);
    await vi.waitFor(() => expect(isRunning(hung)).toBe(false), WAIT);
    vi.unstubAllEnvs();
    vi.stubEnv('LLMGW_FAKE_GPUS', join(GPU_FIXTURES, 'pcie-l40sx4'));
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    expect(sampler.pid).not.toBe(hung);
  });

  it('kills a loop that reported and then went silent (stopped), as the one silent from its start', async () => {
    // The watchdog sleeps until silence could pass the limit (nextSilenceCheckMs),
    // re-armed as readings come: one that stops after many readings is still caught.
    const { sampler, lines, setUsed } = setup({ timeoutMs: 300 });
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    // The loop running now, its pid read as it is stopped: on a loaded machine the first loop can be
    // past the 400 ms limit already, killed and replaced, and its pid then gone (ESRCH).
    const loop = await vi.waitFor(() => {
      const pid = sampler.pid as number;
      expect(pid).toBeGreaterThan(0);
      process.kill(-pid, 'SIGSTOP');
      return pid;
    }, WAIT);
    await vi.waitFor(() => expect(lines.find((l) => l.msg.startsWith('GPU memory readings stopped'))?.err).toBe('nvidia-smi gave no reading for 400ms'), WAIT);
    await vi.waitFor(() => expect(isRunning(loop)).toBe(false), WAIT);
    setUsed([5, 6, 7, 8]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([5, 6, 7, 8]), WAIT);
    expect(sampler.pid).not.toBe(loop);
  });

  it('runs nvidia-smi once per interval when its loop never reports, and says so', async () => {
    // 1 s, not less: each one-shot nvidia-smi (a node process here) must
    // answer within interval + timeout, and on a loaded machine starting
    // node alone took longer than 200 ms, so every one-shot was killed too.
    const { sampler, messages, setUsed } = setup({ timeoutMs: 1000 });
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_LOOP_SILENT', '1');
    sampler.start();
    await vi.waitFor(() => expect(messages()).toContain('nvidia-smi gave no reading in loop mode; running it once per interval instead'), WAIT);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    // One process per reading now, each gone when it has answered.
    const pids = new Set<number>();
    await vi.waitFor(() => {
      if (sampler.pid) pids.add(sampler.pid);
      expect(pids.size).toBeGreaterThanOrEqual(2);
    }, WAIT);
    expect(messages().filter((m) => m.startsWith('GPU memory readings stopped'))).toHaveLength(1);
  });

  it('says so when nvidia-smi is not installed', async () => {
    const lines: { msg: string; err?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
    const sampler = new GpuMemorySampler({ nvidiaSmi: join(tmp, 'no-such-nvidia-smi'), intervalMs: INTERVAL_MS, timeoutMs: 1000, logger });
    onTestFinished(() => sampler.close());
    sampler.start();
    await vi.waitFor(() => expect(lines[0]?.err).toBe(`${join(tmp, 'no-such-nvidia-smi')} not found`), WAIT);
    expect(sampler.latest()).toEqual([]);
  });

  it('keeps the slot of a GPU that answers with a fault marker', async () => {
    const { sampler, setUsed, dir } = setup();
    setUsed([5, 6]);
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([5, 6]), WAIT);
    setCsv(dir, 'index, memory.used [MiB]\n0, 7 MiB\n1, [GPU requires reset]\n');
    await vi.waitFor(() => expect(sampler.latest()).toEqual([7, 6]), WAIT);
  });

  it('falls back to one query per interval, said once, when nvidia-smi ignores --loop-ms and exits after one report', async () => {
    // A wrapper that drops --loop-ms, as some container shims do.
    const shim = join(tmp, 'no-loop-nvidia-smi');
    writeFileSync(shim, `#!/bin/sh\nfor a; do shift; case "$a" in --loop-ms=*) ;; *) set -- "$@" "$a";; esac; done\nexec ${FAKE_NVIDIA_SMI} "$@"\n`);
    chmodSync(shim, 0o755);
    const { sampler, messages, setUsed } = setup({ nvidiaSmi: shim });
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    setUsed([5, 6, 7, 8]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([5, 6, 7, 8]), WAIT);
    expect(messages().filter((m) => m.startsWith('nvidia-smi ignores --loop-ms'))).toHaveLength(1);
    expect(messages().filter((m) => m.startsWith('GPU memory readings stopped') || m === 'GPU memory readings resumed')).toEqual([]);
  });
});

describe('GpuMemorySampler.readNow (issue 36 item 8)', () => {
  /** A wrapper that notes each start of nvidia-smi in `log`, one line each, then runs the fake. */
  function countingNvidiaSmi(): { path: string; starts: () => string[] } {
    const path = join(mkdtempSync(join(tmp, 'count-')), 'nvidia-smi');
    const log = `${path}.starts`;
    writeFileSync(log, '');
    writeFileSync(path, `#!/bin/sh\necho "$*" >> ${log}\nexec ${FAKE_NVIDIA_SMI} "$@"\n`);
    chmodSync(path, 0o755);
    return { path, starts: () => readFileSync(log, 'utf8').split('\n').filter((l) => l !== '') };
  }

  it('reads every GPU at once, before any loop runs, and what it read is the latest reading', async () => {
    const { sampler, setUsed } = setup();
    setUsed([9, 8, 7, 6]);
    const asked = Date.now();
    expect(await sampler.readNow()).toEqual([9, 8, 7, 6]);
    expect(sampler.latest()).toEqual([9, 8, 7, 6]);
    expect(sampler.readAtMs).toBeGreaterThanOrEqual(asked);
    expect(sampler.pid).toBeUndefined();
  });

  it('sees a change the running loop has not reported yet', async () => {
    // A loop that reports once a minute: only the fresh read can see the change.
    const { sampler, setUsed } = setup({ intervalMs: 60_000 });
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    setUsed([1, 2, 3, 4]);
    expect(await sampler.readNow()).toEqual([1, 2, 3, 4]);
    expect(sampler.latest()).toEqual([1, 2, 3, 4]);
  });

  it('starts one nvidia-smi for asks that come together', async () => {
    const smi = countingNvidiaSmi();
    const { sampler } = setup({ nvidiaSmi: smi.path });
    const answers = await Promise.all([sampler.readNow(), sampler.readNow(), sampler.readNow()]);
    expect(answers).toEqual([[0, 412, 0, 0], [0, 412, 0, 0], [0, 412, 0, 0]]);
    expect(smi.starts()).toEqual(['--query-gpu=index,memory.used --format=csv,noheader,nounits']);
    await sampler.readNow();
    expect(smi.starts()).toHaveLength(2);
  });

  it('rejects when no reading can be taken, leaving the last reading as it was', async () => {
    const { sampler, dir } = setup();
    await sampler.readNow();
    rmSync(join(dir, 'query-gpu.csv'));
    await expect(sampler.readNow()).rejects.toThrow('nvidia-smi exited with code 6');
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
    const missing = new GpuMemorySampler({ nvidiaSmi: join(tmp, 'no-such-nvidia-smi'), intervalMs: INTERVAL_MS, timeoutMs: 1000 });
    await expect(missing.readNow()).rejects.toThrow(/ENOENT/);
  });

  it('kills an nvidia-smi silent past the timeout and says so', async () => {
    const { sampler } = setup({ timeoutMs: 200 });
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_SLEEP', '30');
    await expect(sampler.readNow()).rejects.toThrow('nvidia-smi gave no reading in 200ms');
  });
});

describe('nextSilenceCheckMs', () => {
  it('is the first check of an every-interval watchdog at which the silence would be over the limit', () => {
    for (const [interval, limit] of [
      [1000, 11_000],
      [100, 400],
      [1000, 1000],
    ] as const) {
      for (let silent = 0; silent <= limit; silent += interval / 4) {
        const next = nextSilenceCheckMs(silent, limit, interval);
        // On the grid of the old setInterval: a whole number of intervals on.
        expect(next % interval).toBe(0);
        expect(next).toBeGreaterThan(0);
        // Over the limit then, and not one interval sooner: the same check that killed before.
        expect(silent + next).toBeGreaterThan(limit);
        expect(silent + next - interval).toBeLessThanOrEqual(limit);
      }
    }
    // With readings a second apart and a 10 s timeout, the agent wakes every 11 s, not every second.
    expect(nextSilenceCheckMs(0, 11_000, 1000)).toBe(12_000);
    expect(nextSilenceCheckMs(800, 11_000, 1000)).toBe(11_000);
  });
});

describe.skipIf(fakeNvmlUnavailable() !== undefined)('GpuMemorySampler through NVML', () => {
  it('reads every GPU in-process, runs no nvidia-smi, and follows the data set', async () => {
    // An nvidia-smi that does not exist: any process start would fail and be logged.
    const { sampler, messages, setUsed } = setup({ nvmlLibrary: buildFakeNvml(), nvidiaSmi: join(tmp, 'no-such-nvidia-smi') });
    sampler.start();
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
    expect(sampler.pid).toBeUndefined();
    setUsed([1, 2, 3, 4]);
    await vi.waitFor(() => expect(sampler.latest()).toEqual([1, 2, 3, 4]), WAIT);
    expect(sampler.pid).toBeUndefined();
    expect(messages().filter((m) => m.startsWith('GPU memory readings'))).toEqual([]);
  });

  it('reads NVML in-process on demand, between its ticks', async () => {
    const { sampler, setUsed } = setup({ nvmlLibrary: buildFakeNvml(), nvidiaSmi: join(tmp, 'no-such-nvidia-smi'), intervalMs: 60_000 });
    sampler.start();
    setUsed([4, 3, 2, 1]);
    expect(await sampler.readNow()).toEqual([4, 3, 2, 1]);
    expect(sampler.pid).toBeUndefined();
  });
});

describe.skipIf(fakeNvmlUnavailable() !== undefined)('GpuMemorySampler with an old driver\'s NVML', () => {
  it('reads through nvidia-smi when NVML lacks nvmlDeviceGetMemoryInfo_v2 (v1 would count reserved memory as used)', async () => {
    const { sampler } = setup({ nvmlLibrary: buildFakeNvml('old') });
    sampler.start();
    await vi.waitFor(() => expect(sampler.latest()).toEqual([0, 412, 0, 0]), WAIT);
    expect(sampler.pid).toBeGreaterThan(0);
  });
});
