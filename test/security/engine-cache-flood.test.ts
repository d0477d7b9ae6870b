import { spawnSync } from 'node:child_process';
import { chmodSync, closeSync, lchownSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { captureLogger } from '../helpers/capture-logger.js';
import { EngineCacheBound } from '../../src/agent/models/engine-cache-bound.js';
import { compileCacheBytes } from '../../src/models/compile-cache-bytes.js';
import { ENGINE_CACHE_SHARE, SURVEY_LIMITS, surveyEngineCaches } from '../../src/models/engine-cache-survey.js';
import { EngineCacheWatch } from '../../src/models/engine-cache-watch.js';
import { compileDirsByEngine } from '../../src/agent/engines/engine-catalog.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { bytes } from '../models/fake-hub.js';

/*
 * Security review 4, F2 and F4: what the engine account writes in its own
 * cache folders must cost the root agent a bounded read, off its event
 * loop's hot paths, never through the account's links, counted by the
 * blocks it takes. The account is nobody (65534): its leaves are its own,
 * and what it plants it plants as itself (links made as root are lchown'd to
 * it; a link's owner does not change what following it does).
 */

const NOBODY = 65534;
const asRoot = process.geteuid?.() === 0;
/** Fewer than the review's 400,000: enough to be eight times one leaf's bound, quick to make on a shared machine. */
const FLOOD = 40_000;


let root: string;
let layout: StoreLayout;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-f2-'));
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
  chownAll(leaf);
  return leaf;
}

function chownAll(path: string): void {
  spawnSync('chown', ['-hR', `${NOBODY}:${NOBODY}`, path]);
}


describe.skipIf(!asRoot)('F2/F4: the engine account\'s caches cost the agent a bounded read that follows no link (run as root, the account as uid 65534)', () => {
  it(`reads at most its bounds of a ${FLOOD}-link flood, follows none of them, and says the leaf is over its bound`, async () => {
    const wedge = leafOf('org/wedge');
    const big = join(wedge, 'big');
    mkdirSync(big);
    for (let i = 0; i < FLOOD; i++) symlinkSync('x', join(big, `l${i}`));
    // The review's wedge: every compile folder of three leaves is a link to the flood.
    const leaves = [wedge, leafOf('org/w2'), leafOf('org/w3')];
    for (const l of leaves) {
      symlinkSync(big, join(l, 'torchinductor'));
      symlinkSync(big, join(l, 'triton'));
      mkdirSync(join(l, 'vllm'));
      symlinkSync(big, join(l, 'vllm', 'torch_compile_cache'));
    }
    chownAll(join(layout.engineCachesDir, String(NOBODY)));
    const t0 = performance.now();
    const s = await surveyEngineCaches(layout);
    const ms = performance.now() - t0;
    console.log(`survey of ${FLOOD} links in one leaf + 3 leaves linked to it: ${s.entries} entries read, ${s.links} links skipped, ${ms.toFixed(0)} ms`);
    // Bounded: no leaf read past its bound, the flood's leaf cut short and said so.
    for (const l of s.leaves) expect(l.entries).toBeLessThanOrEqual(SURVEY_LIMITS.entriesPerLeaf);
    expect(s.entries).toBeLessThanOrEqual(SURVEY_LIMITS.entries);
    const flooded = s.leaves.find((l) => l.leaf === 'models--org--wedge');
    expect(flooded).toMatchObject({ capped: true, compiled: false, bytes: 0 });
    // The other leaves' compile folders are links: skipped, never walked (each leaf read 4 entries: three links and vllm/).
    for (const l of s.leaves.filter((x) => x !== flooded)) expect(l).toMatchObject({ entries: 4, compiled: false, capped: false });
    expect(s.capped).toBe(true);
    // Over its bound: counted as the whole share, said once in the log.
    expect(await compileCacheBytes(layout, 1_000_000, s)).toBe(1_000_000 * ENGINE_CACHE_SHARE);
    const log = captureLogger();
    const bound = new EngineCacheBound(log.logger);
    bound.judge(s, 1_000_000);
    bound.judge(s, 1_000_000);
    expect(log.records.filter((r) => /over their bound/.test(String(r.msg)))).toHaveLength(1);
  }, 120_000);

  it('counts allocated blocks, not sizes: a 1 TiB sparse file counts ~0 and still says a compile cache exists', async () => {
    const leaf = leafOf('org/sparse');
    mkdirSync(join(leaf, 'triton'));
    closeSync(openSync(join(leaf, 'triton', 'x'), 'w'));
    spawnSync('truncate', ['-s', '1T', join(leaf, 'triton', 'x')]);
    writeFileSync(join(leaf, 'triton', 'real'), bytes(300_000, 7));
    chownAll(leaf);
    const s = await surveyEngineCaches(layout, SURVEY_LIMITS, compileDirsByEngine());
    // 300,000 bytes take 75 blocks of 4 KiB (a few more for an indirect block on some filesystems); the 1 TiB file none.
    expect(s.leaves[0]?.bytes).toBeGreaterThanOrEqual(300_000);
    expect(s.leaves[0]?.bytes).toBeLessThan(300_000 + 16_384);
    expect(s.leaves[0]?.compiled).toBe(true);
    // Real bytes over the share count as the share.
    expect(await compileCacheBytes(layout, 440_000, s)).toBe(Math.floor(440_000 * ENGINE_CACHE_SHARE));
  });

  it('is no oracle on root-only folders: a compile folder linked to one that holds a file is not a compile cache', async () => {
    const privateRoot = join(root, 'private-root');
    mkdirSync(privateRoot, { mode: 0o700 });
    writeFileSync(join(privateRoot, 'id_ed25519'), 'key');
    const leaf = leafOf('org/oracle');
    symlinkSync(privateRoot, join(leaf, 'triton'));
    lchownSync(join(leaf, 'triton'), NOBODY, NOBODY);
    const watch = new EngineCacheWatch(layout, { compileDirs: compileDirsByEngine() });
    await watch.refresh();
    expect(watch.compiled('org/oracle', 'vllm')).toBe(false);
    // The true positive: a real file in the account's own triton folder.
    rmSync(join(leaf, 'triton'));
    mkdirSync(join(leaf, 'triton', 'ab'), { recursive: true });
    writeFileSync(join(leaf, 'triton', 'ab', 'kernel.so'), 'x');
    chownAll(leaf);
    await watch.refresh();
    expect(watch.compiled('org/oracle', 'vllm')).toBe(true);
  });

  it('a folder swapped for a link after it was listed is not walked: each folder is held open O_NOFOLLOW and read through its fd', async () => {
    // What the account can do between a listing and a read (inotify tells it when): here the swap is made before the
    // survey, which sees a link and skips it; the held-fd walk means the window the review names (a path read later) is gone.
    const leaf = leafOf('org/swap');
    const privateRoot = join(root, 'private-root');
    mkdirSync(join(privateRoot, 'deep'), { recursive: true, mode: 0o700 });
    writeFileSync(join(privateRoot, 'deep', 'f'), bytes(50_000, 1));
    symlinkSync(privateRoot, join(leaf, 'torchinductor'));
    chownAll(leaf);
    const s = await surveyEngineCaches(layout);
    expect(s.leaves[0]).toMatchObject({ bytes: 0, compiled: false });
    expect(s.links).toBe(1);
  });

  it('the reports never read the folders: compiled() answers from the last survey and starts at most one more while it is fresh', async () => {
    const leaf = leafOf('org/hot');
    mkdirSync(join(leaf, 'triton'));
    writeFileSync(join(leaf, 'triton', 'k'), 'x');
    chownAll(leaf);
    const watch = new EngineCacheWatch(layout, { compileDirs: compileDirsByEngine() });
    await watch.refresh();
    const surveys = watch.surveys;
    // A /metrics scrape loop asks thousands of times: one answer each, from memory.
    for (let i = 0; i < 10_000; i++) expect(watch.compiled('org/hot', 'vllm')).toBe(true);
    expect(watch.surveys).toBe(surveys);
    expect(readdirSync(join(leaf, 'triton'))).toEqual(['k']);
  });
});
