import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { modelBlobFiles, WARM_READ_BYTES } from '../../src/models/page-cache.js';
import { pullModel } from '../../src/models/pull-model.js';
import { describeModel } from '../../src/models/scan-store.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { type WarmPhase, warmModel } from '../../src/models/warm-model.js';
import { until } from '../helpers/engine-processes.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * Security review 4, F9: each PrefetchModel{page_cache} started one more
 * full read of its model, with its own half of MemAvailable. Now asks of a
 * model whose warm is in progress join it, and one warm reads at a time on
 * the node, across processes too (an flock).
 */

const MODEL_BYTES = 16 * 1024 * 1024;
/** One warm's reads of a model: one progress report each. */
const READS = MODEL_BYTES / WARM_READ_BYTES;
const hub = new FakeHub();
hub.repos.set('acme/a', fakeRepo('acme/a', [{ path: 'w.bin', content: bytes(MODEL_BYTES, 1), lfs: true }]));
hub.repos.set('acme/b', fakeRepo('acme/b', [{ path: 'w.bin', content: bytes(MODEL_BYTES, 2), lfs: true }]));
hub.repos.set('acme/c', fakeRepo('acme/c', [
  { path: 'w-1.bin', content: bytes(MODEL_BYTES / 2, 3), lfs: true },
  { path: 'w-2.bin', content: bytes(MODEL_BYTES / 2, 4), lfs: true },
]));
const dir = mkdtempSync(join(tmpdir(), 'llmgw-warm-gate-'));
const layout = new StoreLayout(dir);
const children: ChildProcess[] = [];

beforeAll(async () => {
  await hub.start();
  for (const repo of ['acme/a', 'acme/b', 'acme/c']) {
    await pullModel(
      { repo, revision: 'main', include: [] },
      { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget: 1e9, concurrency: new ConcurrencyLimit(2), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(60_000) },
    );
  }
}, 90_000);
afterEach(() => {
  for (const c of children.splice(0)) killGroup(c);
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('page-cache warms', () => {
  it('joins a second ask of a model whose warm is in progress: one read, one result', async () => {
    let reads = 0;
    const first = warmModel(layout, 'acme/a', { onBytes: () => reads++ });
    const second = warmModel(layout, 'acme/a', { onBytes: () => reads++ });
    const [a, b] = await Promise.all([first, second]);
    expect(b).toBe(a);
    expect(a.readBytes).toBe(MODEL_BYTES);
    // One warm's reads, not two.
    expect(reads).toBe(READS);
  });

  it('still runs a warm of another model, after the first, never reading both at once', async () => {
    const order: string[] = [];
    const [a, b] = await Promise.all([
      warmModel(layout, 'acme/a', { onBytes: () => order.push('a') }),
      warmModel(layout, 'acme/b', { onBytes: () => order.push('b') }),
    ]);
    expect(a.readBytes).toBe(MODEL_BYTES);
    expect(b.readBytes).toBe(MODEL_BYTES);
    // One after the other, whichever took the turn first (each first checks its model is complete).
    expect(order.join('')).toMatch(new RegExp(`^(a{${READS}}b{${READS}}|b{${READS}}a{${READS}})$`));
    // Done, not held: a warm after them runs again.
    expect((await warmModel(layout, 'acme/a')).readBytes).toBe(MODEL_BYTES);
  });

  it("waits while another process's warm holds the node's turn, and reads once it ends", async () => {
    const holder = await anotherProcessHoldsTheTurn();
    let waited = false;
    let reads = 0;
    let settled = false;
    const warm = warmModel(layout, 'acme/b', { onWait: () => (waited = true), onBytes: () => reads++ }).finally(() => (settled = true));
    await until(() => waited, 'the warm waiting', 20_000);
    // Held by the other process: nothing read, not settled (several polls of the lock pass meanwhile).
    await new Promise((r) => setTimeout(r, 1000));
    expect(settled).toBe(false);
    expect(reads).toBe(0);
    killGroup(holder);
    const r = await warm;
    expect(r.readBytes).toBe(MODEL_BYTES);
    expect(reads).toBe(READS);
  });

  it('judges the model again once a turn waited for is its own: one made incomplete meanwhile is refused, not read in part', async () => {
    const holder = await anotherProcessHoldsTheTurn();
    let waited = false;
    let reads = 0;
    const warm = warmModel(layout, 'acme/c', { onWait: () => (waited = true), onBytes: () => reads++ });
    const refused = expect(warm).rejects.toThrow(/acme\/c is not complete in the store/);
    // Complete when asked: it waits for the turn rather than being refused at once.
    await until(() => waited, 'the warm waiting', 20_000);
    // Meanwhile one of its two blobs goes (an eviction, a hand): the other alone would have been read before.
    const blobs = await modelBlobFiles(layout, 'acme/c');
    expect(blobs).toHaveLength(2);
    unlinkSync((blobs[0] as { path: string }).path);
    killGroup(holder);
    await refused;
    expect(reads).toBe(0);
  });

  it('tells its steps in order, a warm queued behind another in this process too', async () => {
    const phases: Record<string, WarmPhase[]> = { a: [], b: [] };
    await Promise.all([
      warmModel(layout, 'acme/a', { onPhase: (p) => phases.a?.push(p) }),
      warmModel(layout, 'acme/b', { onPhase: (p) => phases.b?.push(p) }),
    ]);
    expect(phases).toEqual({ a: ['planned', 'turn', 'before', 'read', 'after'], b: ['planned', 'turn', 'before', 'read', 'after'] });
  });
  it('refuses a model whose blob is a byte short of its manifest, as models list does, and reads it once whole again', async () => {
    // The warm judges sizes from its one listing of the blobs (no stat of its own): a short blob must still show.
    const [blob] = await modelBlobFiles(layout, 'acme/a');
    const path = (blob as { path: string }).path;
    const whole = readFileSync(path);
    try {
      truncateSync(path, MODEL_BYTES - 1);
      expect((await describeModel(layout, 'acme/a')).complete).toBe(false);
      await expect(warmModel(layout, 'acme/a')).rejects.toThrow(/acme\/a is not complete in the store/);
    } finally {
      writeFileSync(path, whole);
    }
    expect((await describeModel(layout, 'acme/a')).complete).toBe(true);
    expect((await warmModel(layout, 'acme/a')).readBytes).toBe(MODEL_BYTES);
  });
  it('refuses a model whose manifest is torn or a FIFO in its place, never hanging on the read, and warms it with its manifest back', async () => {
    // The plan reads the manifest synchronously: a FIFO there with no writer must read as nothing, not block the process.
    const manifest = layout.manifestPath('acme/b');
    const kept = readFileSync(manifest);
    try {
      writeFileSync(manifest, kept.subarray(0, kept.length >> 1));
      await expect(warmModel(layout, 'acme/b')).rejects.toThrow(/^acme\/b is not complete in the store/);
      unlinkSync(manifest);
      expect(spawnSync('mkfifo', ['-m', '600', manifest]).status).toBe(0);
      await expect(warmModel(layout, 'acme/b')).rejects.toThrow(/^acme\/b is not complete in the store/);
    } finally {
      rmSync(manifest, { force: true });
      writeFileSync(manifest, kept);
    }
    expect((await warmModel(layout, 'acme/b')).readBytes).toBe(MODEL_BYTES);
  });
  it('refuses a model with a partial download beside its blobs as models list calls it incomplete; an empty one is no partial download', async () => {
    const partial = join(layout.repoDir('acme/b'), 'blobs', `${'e'.repeat(64)}.incomplete`);
    try {
      writeFileSync(partial, 'x'.repeat(10));
      expect((await describeModel(layout, 'acme/b')).complete).toBe(false);
      await expect(warmModel(layout, 'acme/b')).rejects.toThrow(/acme\/b is not complete in the store/);
      // A pull that created its file and was stopped before a byte: nothing partial, as models list says.
      writeFileSync(partial, '');
      expect((await describeModel(layout, 'acme/b')).complete).toBe(true);
      expect((await warmModel(layout, 'acme/b')).readBytes).toBe(MODEL_BYTES);
    } finally {
      rmSync(partial, { force: true });
    }
  });
});

/** Another process holding the node's warm turn: flock(1) on the warm lock, killed by killGroup (or after the test). */
async function anotherProcessHoldsTheTurn(): Promise<ChildProcess> {
  const lock = layout.warmLockPath();
  mkdirSync(dirname(lock), { recursive: true });
  // Its own process group: flock(1) forks the command, and the child holds the lock too.
  const holder = spawn('flock', [lock, 'sleep', '60'], { stdio: 'ignore', detached: true });
  children.push(holder);
  // flock(1) holds it once it has run its command: wait for that by trying the lock ourselves through flock -n.
  await until(() => spawnSyncFlockBusy(lock), 'flock(1) holding the warm lock', 20_000);
  return holder;
}

function killGroup(c: ChildProcess): void {
  try {
    if (c.pid !== undefined) process.kill(-c.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** Whether another process holds `lock` (flock -n fails with 1). */
function spawnSyncFlockBusy(lock: string): boolean {
  return spawnSync('flock', ['-n', lock, 'true']).status === 1;
}
