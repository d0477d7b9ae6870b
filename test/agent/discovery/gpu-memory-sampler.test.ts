import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { GpuMemorySampler } from '../../../src/agent/discovery/gpu-memory-sampler.js';
import { FAKE_NVIDIA_SMI, GPU_FIXTURES } from '../../helpers/fake-gpus.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-sampler-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

/** A data set this test may rewrite, and a logger whose lines it can read. */
function setup() {
  const dir = mkdtempSync(join(tmp, 'ds-'));
  cpSync(join(GPU_FIXTURES, 'pcie-l40sx4'), dir, { recursive: true });
  vi.stubEnv('LLMGW_FAKE_GPUS', dir);
  const lines: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  const sampler = new GpuMemorySampler({ nvidiaSmi: FAKE_NVIDIA_SMI, timeoutMs: 1500, logger });
  const setUsed = (mb: number[]) =>
    writeFileSync(
      join(dir, 'query-gpu.csv'),
      `index, memory.used [MiB]\n${mb.map((m, i) => `${i}, ${m} MiB`).join('\n')}\n`,
    );
  return { sampler, lines, setUsed, dir };
}

describe('GpuMemorySampler', () => {
  it('has no reading before the first refresh, then one per GPU in order', async () => {
    const { sampler } = setup();
    expect(sampler.latest()).toEqual([]);
    await sampler.refresh();
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
  });

  it('keeps the last reading through failures, logs once, and logs the recovery', async () => {
    const { sampler, lines, setUsed, dir } = setup();
    await sampler.refresh();
    rmSync(join(dir, 'query-gpu.csv'));
    await sampler.refresh();
    await sampler.refresh();
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
    expect(lines.filter((l) => l.msg.startsWith('GPU memory refresh failed'))).toHaveLength(1);
    setUsed([1, 2, 3, 4]);
    await sampler.refresh();
    expect(sampler.latest()).toEqual([1, 2, 3, 4]);
    expect(lines.map((l) => l.msg)).toContain('GPU memory refresh recovered');
  });

  it('keeps the last reading when nvidia-smi hangs past the timeout', async () => {
    const { sampler } = setup();
    await sampler.refresh();
    vi.stubEnv('LLMGW_FAKE_NVIDIA_SMI_SLEEP', '600');
    await sampler.refresh();
    expect(sampler.latest()).toEqual([0, 412, 0, 0]);
  });

  it('keeps the slot of a GPU that answers with a fault marker', async () => {
    const { sampler, setUsed, dir } = setup();
    setUsed([5, 6]);
    await sampler.refresh();
    writeFileSync(join(dir, 'query-gpu.csv'), 'index, memory.used [MiB]\n0, 7 MiB\n1, [GPU requires reset]\n');
    await sampler.refresh();
    expect(sampler.latest()).toEqual([7, 6]);
  });

  it('shares one refresh between concurrent callers', async () => {
    const { sampler } = setup();
    const a = sampler.refresh();
    const b = sampler.refresh();
    expect(a).toBe(b);
    await a;
    expect(sampler.refresh()).not.toBe(a);
  });
});
