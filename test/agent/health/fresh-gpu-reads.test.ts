import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { FreshGpuReads } from '../../../src/agent/health/fresh-gpu-reads.js';
import { GpuMemorySampler } from '../../../src/agent/health/gpu-memory-sampler.js';
import { readShardGpuMib } from '../../../src/agent/supervisor/shard/agent-sleep-probes.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-fresh-reads-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const WAIT = { timeout: 15_000, interval: 20 };

/**
 * A stand-in nvidia-smi whose n-th run notes "start n", waits for the file
 * go-n (or go-all), then answers GPU 0 = n MiB and GPU 1 = 10n MiB (or what
 * the file answer-n holds), or exits 6 when fail-n exists; "end n" when done.
 * Which run answered an ask is then read from the ask's answer.
 */
function gatedNvidiaSmi() {
  const dir = mkdtempSync(join(tmp, 'smi-'));
  const path = join(dir, 'nvidia-smi');
  writeFileSync(join(dir, 'count'), '0');
  writeFileSync(join(dir, 'log'), '');
  writeFileSync(
    path,
    [
      '#!/bin/sh',
      `d=${dir}`,
      'n=$(( $(cat $d/count) + 1 )); echo $n > $d/count',
      'echo "start $n" >> $d/log',
      'while [ ! -e $d/go-$n ] && [ ! -e $d/go-all ]; do sleep 0.02; done',
      'if [ -e $d/fail-$n ]; then echo "end $n" >> $d/log; exit 6; fi',
      'if [ -e $d/answer-$n ]; then cat $d/answer-$n; else printf "0, %s\\n1, %s\\n" "$n" "$((n * 10))"; fi',
      'echo "end $n" >> $d/log',
      '',
    ].join('\n'),
  );
  chmodSync(path, 0o755);
  const log = () => readFileSync(join(dir, 'log'), 'utf8').split('\n').filter((l) => l !== '');
  return {
    path,
    log,
    starts: () => log().filter((l) => l.startsWith('start')).length,
    go: (n: number | 'all') => writeFileSync(join(dir, `go-${n}`), ''),
    fail: (n: number) => writeFileSync(join(dir, `fail-${n}`), ''),
    answer: (n: number, text: string) => writeFileSync(join(dir, `answer-${n}`), text),
    started: (n: number) => existsSync(join(dir, 'log')) && log().includes(`start ${n}`),
  };
}

function reads(nvidiaSmi: string, timeoutMs = 10_000) {
  const applied: { readings: [number, number | undefined][]; begunAtMs: number }[] = [];
  const fresh = new FreshGpuReads({ nvidiaSmi, timeoutMs, onReadings: (readings, begunAtMs) => applied.push({ readings, begunAtMs }) });
  onTestFinished(() => fresh.close());
  return { fresh, applied };
}

/** A promise's outcome as it comes, readable at any time. */
function track<T>(p: Promise<T>) {
  const t: { value?: T; err?: Error; done: boolean } = { done: false };
  p.then(
    (v) => Object.assign(t, { value: v, done: true }),
    (e: Error) => Object.assign(t, { err: e, done: true }),
  );
  return t;
}

/** Whether a child process handle is open in this process now. */
const spawnedSomething = () => process.getActiveResourcesInfo().includes('ProcessWrap');

describe('FreshGpuReads', () => {
  it('starts no nvidia-smi in the tick that asks (a READY status queued there goes out first), and one for every ask of that tick', async () => {
    const smi = gatedNvidiaSmi();
    smi.go('all');
    const { fresh } = reads(smi.path);
    expect(spawnedSomething()).toBe(false);
    const asks = [fresh.ask(), fresh.ask(), fresh.ask()];
    expect(spawnedSomething()).toBe(false);
    expect(await Promise.all(asks)).toEqual([[1, 10], [1, 10], [1, 10]]);
    expect(smi.starts()).toBe(1);
  });

  it('never answers an ask with a read begun before it: asks made while one runs share the next, begun when it ends', async () => {
    const smi = gatedNvidiaSmi();
    const { fresh, applied } = reads(smi.path);
    const first = track(fresh.ask());
    await vi.waitFor(() => expect(smi.started(1)).toBe(true), WAIT);
    const askedAtMs = Date.now();
    const b = track(fresh.ask());
    const c = track(fresh.ask());
    smi.go(1);
    await vi.waitFor(() => expect(first.done).toBe(true), WAIT);
    expect(first.value).toEqual([1, 10]);
    // Run 1 has answered; b and c wait for run 2, which waits for its gate.
    await vi.waitFor(() => expect(smi.started(2)).toBe(true), WAIT);
    expect(b.done || c.done).toBe(false);
    smi.go(2);
    await vi.waitFor(() => expect(b.done && c.done).toBe(true), WAIT);
    expect([b.value, c.value]).toEqual([[2, 20], [2, 20]]);
    // One at a time, and the read that answered b and c began after they asked.
    expect(smi.log()).toEqual(['start 1', 'end 1', 'start 2', 'end 2']);
    expect(applied[1]?.begunAtMs).toBeGreaterThanOrEqual(askedAtMs);
  });

  it('leaves out of its answer a GPU whose cell is a fault marker: a shard on another GPU still has its reading', async () => {
    const smi = gatedNvidiaSmi();
    smi.answer(1, '0, 100\n1, [GPU requires reset]\n2, 300\n');
    smi.go('all');
    const { fresh, applied } = reads(smi.path);
    const answer = await fresh.ask();
    expect(answer[0]).toBe(100);
    expect(answer[1]).toBeUndefined();
    expect(answer[2]).toBe(300);
    expect(applied[0]?.readings).toEqual([[0, 100], [1, undefined], [2, 300]]);
  });

  it('a failing read refuses only its own asks: those made while it ran get a read of their own', async () => {
    const smi = gatedNvidiaSmi();
    smi.fail(1);
    const { fresh } = reads(smi.path);
    const first = track(fresh.ask());
    await vi.waitFor(() => expect(smi.started(1)).toBe(true), WAIT);
    const later = track(fresh.ask());
    smi.go(1);
    smi.go(2);
    await vi.waitFor(() => expect(first.done && later.done).toBe(true), WAIT);
    expect(first.err?.message).toBe('nvidia-smi exited with code 6');
    expect(later.value).toEqual([2, 20]);
  });

  it('a silent read is killed at its limit with its asks and those made while it hung; the next ask gets a fresh read', async () => {
    const smi = gatedNvidiaSmi();
    const { fresh } = reads(smi.path, 300);
    const first = track(fresh.ask());
    await vi.waitFor(() => expect(smi.started(1)).toBe(true), WAIT);
    const during = track(fresh.ask());
    await vi.waitFor(() => expect(first.done && during.done).toBe(true), WAIT);
    expect(first.err?.message).toBe('nvidia-smi gave no reading in 300ms');
    expect(during.err?.message).toBe('nvidia-smi gave no reading in 300ms');
    expect(smi.starts()).toBe(1);
    smi.go(2);
    // Until the killed one has exited an ask is refused at once; it exits on SIGKILL here.
    await vi.waitFor(async () => expect(await fresh.ask()).toEqual([2, 20]), WAIT);
  });

  it('refuses every waiting ask once closed, and kills the read', async () => {
    const smi = gatedNvidiaSmi();
    const { fresh } = reads(smi.path);
    const first = track(fresh.ask());
    await vi.waitFor(() => expect(smi.started(1)).toBe(true), WAIT);
    const during = track(fresh.ask());
    fresh.close();
    await vi.waitFor(() => expect(first.done && during.done).toBe(true), WAIT);
    expect(first.err?.message).toBe('the GPU memory sampler is closed');
    expect(during.err?.message).toBe('the GPU memory sampler is closed');
    await expect(fresh.ask()).rejects.toThrow('closed');
  });
});

describe('a shard\'s GPU memory at READY (readShardGpuMib) from shared reads', () => {
  it('sums the shard\'s own GPUs from a read begun after its ask, and is undefined only for the shard whose GPU gave a fault marker', async () => {
    const smi = gatedNvidiaSmi();
    smi.answer(1, '0, 5\n1, 6\n2, 7\n3, 8\n');
    smi.answer(2, '0, 500\n1, [GPU requires reset]\n2, 700\n3, 800\n');
    const sampler = new GpuMemorySampler({ nvidiaSmi: smi.path, intervalMs: 60_000, timeoutMs: 10_000 });
    onTestFinished(() => sampler.close());
    const read = readShardGpuMib(sampler);
    const early = read([0]);
    await vi.waitFor(() => expect(smi.started(1)).toBe(true), WAIT);
    // Two shards become READY while run 1 (begun before them) runs: both are answered by run 2.
    const a = read([0, 3]);
    const b = read([1]);
    smi.go(1);
    expect(await early).toBe(5);
    smi.go(2);
    expect(await a).toBe(1300);
    expect(await b).toBeUndefined();
    // The heartbeats' figure keeps GPU 1's last slot (the loop's rule), the rest are run 2's.
    expect(sampler.latest()).toEqual([500, 6, 700, 800]);
  });
});
