import { spawnSync } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { type PullContext, pullModel } from '../../src/models/pull-model.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { FakeHub, bytes, fakeRepo } from '../models/fake-hub.js';

/*
 * Security review 4, F4: the engine account decided what models.budget
 * holds. Its caches counted by apparent size: a sparse file that takes no
 * disk made the next pull evict every other tenant's model. They count by
 * allocated blocks now, and never more than their share of the budget (a
 * quarter, ENGINE_CACHE_SHARE). Only pullModel's public behaviour is used,
 * so this file runs against the original code too (where it fails).
 */

const NOBODY = 65534;
const asRoot = process.geteuid?.() === 0;

const hub = new FakeHub();
for (const x of ['a', 'b', 'c', 'd']) hub.repos.set(`tenant-${x}/model`, fakeRepo(`tenant-${x}/model`, [{ path: 'w.bin', content: bytes(100_000, x.charCodeAt(0)), lfs: true }]));

let root: string;
let layout: StoreLayout;
beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-f4-'));
  chmodSync(root, 0o755);
  layout = new StoreLayout(join(root, 'store'));
  mkdirSync(layout.cacheDir, { mode: 0o755 });
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** The account's leaf for `model`, as prepareEngineCache makes it: engines/<uid>/<engine>/ root's, the leaf nobody's, 0700. */
function leafOf(model: string, engine = 'vllm'): string {
  const leaf = layout.engineCacheDir(NOBODY, engine, model);
  mkdirSync(join(leaf, '..'), { recursive: true, mode: 0o755 });
  mkdirSync(leaf, { mode: 0o700 });
  return leaf;
}

function chownAll(path: string): void {
  spawnSync('chown', ['-hR', `${NOBODY}:${NOBODY}`, path]);
}

function ctx(budget: number): PullContext {
  return { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget, concurrency: new ConcurrencyLimit(2), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(20_000) };
}

describe.skipIf(!asRoot)('F4: the engine account does not decide what models.budget holds (run as root, the account as uid 65534)', () => {
  it('counts allocated blocks: a 1 TiB sparse file counts ~0, and the next pull evicts no other tenant\'s model (F4)', async () => {
    const budget = 420_000;
    for (const x of ['a', 'b', 'c']) await pullModel({ repo: `tenant-${x}/model`, revision: 'main', include: [] }, ctx(budget));
    const leaf = leafOf('org/anything');
    mkdirSync(join(leaf, 'triton'));
    const fd = openSync(join(leaf, 'triton', 'x'), 'w');
    closeSync(fd);
    spawnSync('truncate', ['-s', '1T', join(leaf, 'triton', 'x')]);
    chownAll(leaf);
    // tenant-d's 100 kB fits beside a, b and c (300 kB) in 420 kB: nothing evicted (by apparent size, 1 TiB evicted them all).
    const r = await pullModel({ repo: 'tenant-d/model', revision: 'main', include: [] }, ctx(budget));
    expect(r.evicted).toEqual([]);
  });

  it('real bytes over the engines\' share count as the share: a pull evicts at most that much of the other tenants\' models', async () => {
    const budget = 440_000;
    for (const x of ['a', 'b']) await pullModel({ repo: `tenant-${x}/model`, revision: 'main', include: [] }, ctx(budget));
    const leaf = leafOf('org/anything');
    mkdirSync(join(leaf, 'triton'));
    writeFileSync(join(leaf, 'triton', 'x'), bytes(300_000, 7)); // 300 kB really on disk, over the engines' quarter of the budget
    chownAll(leaf);
    // a + b + c = 300 kB + the share (110 kB) fits 440 kB: counted in full (300 kB) the caches would have evicted a and b.
    const r = await pullModel({ repo: 'tenant-c/model', revision: 'main', include: [] }, ctx(budget));
    expect(r.evicted).toEqual([]);
    // The innocent look-alike: caches within their share count in full, and make room as before (a+b+c+d 400 kB + 60 kB > 440 kB).
    rmSync(join(leaf, 'triton', 'x'));
    writeFileSync(join(leaf, 'triton', 'y'), bytes(60_000, 8));
    chownAll(leaf);
    const r2 = await pullModel({ repo: 'tenant-d/model', revision: 'main', include: [] }, ctx(budget));
    expect(r2.evicted).toEqual(['tenant-a/model']);
  });

});
