import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { inventoryCachePath, writeInventoryCache } from '../../src/agent/inventory-cache.js';
import { InventoryWatcher } from '../../src/agent/inventory-watcher.js';
import { GpuLinkSchema, GpuSchema, type Inventory, InventorySchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { until } from '../helpers/engine-processes.js';

const box = (gpus: number, usedMb = 0): Inventory =>
  create(InventorySchema, { driverVersion: '550.54', gpus: Array.from({ length: gpus }, (_, index) => create(GpuSchema, { index, uuid: `GPU-${index}`, memoryUsedMb: usedMb })) });

function stateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-invwatch-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Stands in for nvidia-smi and sysfs (no GPU here): each scan answers with
 * what the test says the box is now, or waits until the test releases it.
 */
function hardware(initial: Inventory) {
  let now = initial;
  let gate: Promise<void> | undefined;
  let open = () => {};
  let inFlight = 0;
  let maxInFlight = 0;
  let calls = 0;
  let failWith: Error | undefined;
  return {
    discover: async (_signal: AbortSignal) => {
      calls++;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        await gate;
        if (failWith) throw failWith;
        return now;
      } finally {
        inFlight--;
      }
    },
    become: (inv: Inventory) => {
      now = inv;
    },
    hang: () => {
      gate = new Promise<void>((r) => {
        open = r;
      });
    },
    release: () => {
      gate = undefined;
      open();
    },
    fail: (err: Error | undefined) => {
      failWith = err;
    },
    calls: () => calls,
    maxInFlight: () => maxInFlight,
  };
}

function watcher(hw: ReturnType<typeof hardware>, dir: string, intervalMs = 60_000, firstScanWaitMs?: number) {
  const changes: Inventory[] = [];
  const { logger, records } = captureLogger();
  const w = new InventoryWatcher({ discover: hw.discover, stateDir: dir, intervalMs, logger, firstScanWaitMs, onChange: (inv) => changes.push(inv) });
  onTestFinished(() => w.stop());
  return { w, changes, records };
}

describe('InventoryWatcher', () => {
  it('without a cache, waits for the first scan, announces it and caches it for the next start', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    const { w, changes } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    expect(w.current().gpus).toHaveLength(8);
    expect(changes.map((c) => c.gpus.length)).toEqual([8]);
    await until(() => existsSync(inventoryCachePath(dir)), 'the inventory cache file');
    expect(JSON.parse(readFileSync(inventoryCachePath(dir), 'utf8')).gpus).toHaveLength(8);
  });

  it('stop() resolves once the cache write of the last scan has ended: the agent exits next, and the next start reads it', async () => {
    const dir = stateDir();
    const { w } = watcher(hardware(box(8)), dir);
    await w.start(new AbortController().signal);
    await w.stop();
    expect(JSON.parse(readFileSync(inventoryCachePath(dir), 'utf8')).gpus).toHaveLength(8);
  });

  it('with a cache, is ready at once with it, and sends the fresh scan when the hardware changed meanwhile', async () => {
    const dir = stateDir();
    await writeInventoryCache(dir, box(7));
    const hw = hardware(box(8));
    hw.hang();
    const { w, changes } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    expect(w.current().gpus).toHaveLength(7);
    expect(changes).toEqual([]);
    hw.release();
    await until(() => changes.length === 1, 'the fresh inventory');
    expect(w.current().gpus).toHaveLength(8);
  });

  it('does not count readings that change every second as a change of hardware', async () => {
    const dir = stateDir();
    await writeInventoryCache(dir, box(8, 100));
    const hw = hardware(box(8, 5000));
    const { w, changes } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    await w.rescan(new AbortController().signal);
    expect(hw.calls()).toBeGreaterThanOrEqual(1);
    expect(changes).toEqual([]);
    // The readings are still taken: heartbeats fall back on them.
    expect(w.current().gpus[0]?.memoryUsedMb).toBe(5000);
  });

  it('keeps the links list of an unchanged topology, so its encoding for the stream is kept too; a changed one is a change', async () => {
    const dir = stateDir();
    const linked = (connection: string) => ({ ...box(2), links: [create(GpuLinkSchema, { a: 'GPU0', b: 'GPU1', connection, nvlinks: 18 }), create(GpuLinkSchema, { a: 'GPU1', b: 'GPU0', connection, nvlinks: 18 })] });
    const hw = hardware(linked('NV18'));
    const { w, changes } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    const first = w.current().links;
    // A fresh scan: equal links in new objects.
    hw.become(linked('NV18'));
    await w.rescan(new AbortController().signal);
    expect(w.current().links).toBe(first);
    expect(changes).toHaveLength(1);
    hw.become(linked('NV12'));
    await w.rescan(new AbortController().signal);
    expect(changes).toHaveLength(2);
    expect(w.current().links.map((l) => l.connection)).toEqual(['NV12', 'NV12']);
  });

  it('runs one scan at a time: timers firing during a hung scan join it instead of starting more', async () => {
    const dir = stateDir();
    await writeInventoryCache(dir, box(8));
    const hw = hardware(box(8));
    hw.hang();
    const { w } = watcher(hw, dir, 10);
    await w.start(new AbortController().signal);
    // Many intervals pass while the first scan hangs.
    await new Promise((r) => setTimeout(r, 200));
    expect(hw.calls()).toBe(1);
    hw.release();
    await until(() => hw.calls() >= 3, 'scans after the hung one');
    expect(hw.maxInFlight()).toBe(1);
  });

  it('keeps the last inventory when a scan fails, and says so', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    const { w, records } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    hw.fail(new Error('nvidia-smi timed out after 10s'));
    await w.rescan(new AbortController().signal);
    expect(w.current().gpus).toHaveLength(8);
    const warning = records.find((r) => r.msg === 'rediscovery failed; keeping the last inventory');
    expect(warning?.err).toBe('nvidia-smi timed out after 10s');
  });

  it('says nothing of a scan ended by the agent shutting down', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    const { w, records, changes } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    hw.become(box(4));
    hw.hang();
    const shutdown = new AbortController();
    const scan = w.rescan(shutdown.signal);
    shutdown.abort();
    hw.fail(new Error('killed'));
    hw.release();
    await scan;
    expect(records.filter((r) => r.level === 40)).toEqual([]);
    expect(changes).toHaveLength(1);
    expect(w.current().gpus).toHaveLength(8);
  });

  it('scans no more once stopped', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    const { w } = watcher(hw, dir, 10);
    await w.start(new AbortController().signal);
    await until(() => hw.calls() >= 2, 'a periodic scan');
    w.stop();
    await new Promise((r) => setTimeout(r, 20));
    const after = hw.calls();
    await new Promise((r) => setTimeout(r, 200));
    expect(hw.calls()).toBe(after);
  });

  it('creates a missing state directory with mode 0700 at start and caches the first scan in it', async () => {
    const dir = join(stateDir(), 'var', 'lib', 'llmgw');
    const hw = hardware(box(8));
    hw.hang();
    const { w } = watcher(hw, dir, 60_000, 10);
    await w.start(new AbortController().signal);
    // There before any scan has ended: nothing else creates it on a node without shards.
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    hw.release();
    await until(() => existsSync(inventoryCachePath(dir)), 'the inventory cache file');
    expect(JSON.parse(readFileSync(inventoryCachePath(dir), 'utf8')).gpus).toHaveLength(8);
  });

  it('on a first boot whose scan outlasts the bound, is ready without GPUs, says why, and sends the inventory when the scan ends', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    hw.hang();
    const { w, changes, records } = watcher(hw, dir, 60_000, 30);
    await w.start(new AbortController().signal);
    expect(w.current().gpus).toEqual([]);
    expect(w.current().warnings).toEqual(['the first hardware scan is still running after 0.03s; the inventory follows when it ends']);
    expect(records.some((r) => r.msg === 'registering before the first hardware scan ended; the inventory follows')).toBe(true);
    expect(changes).toEqual([]);
    hw.release();
    await until(() => changes.length === 1, 'the inventory once the scan ended');
    expect(changes[0]?.gpus).toHaveLength(8);
    expect(w.current().warnings).toEqual([]);
    await until(() => existsSync(inventoryCachePath(dir)), 'the inventory cache file');
  });

  it('on a first boot whose scan ends within the bound, waits for it and never shows the placeholder', async () => {
    const dir = stateDir();
    const hw = hardware(box(8));
    const { w, records } = watcher(hw, dir, 60_000, 5000);
    await w.start(new AbortController().signal);
    expect(w.current().gpus).toHaveLength(8);
    expect(w.current().warnings).toEqual([]);
    expect(records.some((r) => r.msg === 'registering before the first hardware scan ended; the inventory follows')).toBe(false);
  });

  it('caches an unchanged scan when the last write failed, so a state directory fixed later gets its cache', async () => {
    const dir = join(stateDir(), 'state');
    // A file where the directory should be: creating it and writing the cache fail (root included).
    writeFileSync(dir, 'not a directory');
    const hw = hardware(box(8));
    const { w, records } = watcher(hw, dir);
    await w.start(new AbortController().signal);
    expect(records.find((r) => r.msg === 'cannot create the state directory; the inventory is not cached for the next start')?.dir).toBe(dir);
    await until(() => records.some((r) => r.msg === 'cannot cache the inventory; the next start scans in full'), 'the failed write');
    rmSync(dir, { force: true });
    // Same hardware as the first scan: only the failed write makes this one write.
    await w.rescan(new AbortController().signal);
    await until(() => existsSync(inventoryCachePath(dir)), 'the cache written after all');
  });
});
