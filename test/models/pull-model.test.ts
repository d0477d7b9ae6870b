import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { formatBytes } from '../../src/lib/format-bytes.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { cachedModelsView } from '../../src/agent/models/cached-models.js';
import { compileCacheBytes } from '../../src/models/compile-cache-bytes.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { engineCacheEnv } from '../../src/models/engine-cache-env.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { pinModel, unpinModel } from '../../src/models/model-pins.js';
import { type PullContext, type PullEvent, pullModel } from '../../src/models/pull-model.js';
import { renderModelsList } from '../../src/models/render-models-list.js';
import { isModelComplete, scanStore } from '../../src/models/scan-store.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { FakeHub, bytes, fakeRepo, gitBlobId, sha256 } from './fake-hub.js';
import { freePort } from '../helpers/engine-processes.js';

const hub = new FakeHub();
const WEIGHTS = bytes(300_000, 1);
const CONFIG = Buffer.from('{"architectures":["LlamaForCausalLM"]}\n');
const TOKENIZER = bytes(20_000, 2);
hub.repos.set(
  'acme/tiny',
  fakeRepo('acme/tiny', [
    { path: 'model.safetensors', content: WEIGHTS, lfs: true },
    { path: 'config.json', content: CONFIG, lfs: false },
    { path: 'tokenizer/tokenizer.json', content: TOKENIZER, lfs: false },
  ]),
);
for (const [i, name] of ['acme/a', 'acme/b', 'acme/c'].entries()) {
  hub.repos.set(name, fakeRepo(name, [{ path: 'w.bin', content: bytes(100_000, 10 + i), lfs: true }]));
}

let dir: string;
let layout: StoreLayout;

function ctx(budget = 10_000_000, events?: PullEvent[]): PullContext {
  return {
    layout,
    hub: { endpoint: hub.url, tokenFile: '' },
    budget,
    concurrency: new ConcurrencyLimit(4),
    limiter: new BandwidthLimiter(undefined),
    signal: AbortSignal.timeout(20_000),
    onEvent: events ? (e) => events.push(e) : undefined,
  };
}

beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-models-'));
  layout = new StoreLayout(dir);
  hub.requests.length = 0;
  hub.corrupt.clear();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('pullModel', () => {
  it('lays the model out as huggingface_hub does: blobs by sha256 or git blob id, relative snapshot links, refs/main', async () => {
    const r = await pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, ctx());
    const commit = (hub.repos.get('acme/tiny') as { commit: string }).commit;
    expect(r).toMatchObject({ commit, files: 3, fetchedBytes: WEIGHTS.length + CONFIG.length + TOKENIZER.length, mismatches: 0, resumedBytes: 0 });
    const repoDir = join(dir, 'hub', 'models--acme--tiny');
    expect(readdirSync(join(repoDir, 'blobs')).sort()).toEqual([sha256(WEIGHTS), gitBlobId(CONFIG), gitBlobId(TOKENIZER)].sort());
    expect(readFileSync(join(repoDir, 'refs', 'main'), 'utf8')).toBe(commit);
    const snap = join(repoDir, 'snapshots', commit);
    expect(readlinkSync(join(snap, 'model.safetensors'))).toBe(`../../blobs/${sha256(WEIGHTS)}`);
    expect(readlinkSync(join(snap, 'tokenizer', 'tokenizer.json'))).toBe(`../../../blobs/${gitBlobId(TOKENIZER)}`);
    expect(readFileSync(join(snap, 'tokenizer', 'tokenizer.json')).equals(TOKENIZER)).toBe(true);
    expect(r.snapshotPath).toBe(snap);
    expect(await isModelComplete(layout, 'acme/tiny', 'main')).toBe(true);
    expect(await isModelComplete(layout, 'acme/tiny', commit)).toBe(true);
    expect(await isModelComplete(layout, 'acme/tiny', 'v2')).toBe(false);
  });

  it('fetches nothing the second time, and only the files --include names', async () => {
    await pullModel({ repo: 'acme/tiny', revision: 'main', include: ['*.json'] }, ctx());
    expect(hub.downloads('model.safetensors')).toHaveLength(0);
    expect(hub.downloads('tokenizer/tokenizer.json')).toHaveLength(1);
    const again = await pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, ctx());
    expect(again.fetchedBytes).toBe(WEIGHTS.length);
    expect(hub.downloads('config.json')).toHaveLength(1);
    // A narrower pull afterwards leaves the snapshot whole.
    await pullModel({ repo: 'acme/tiny', revision: 'main', include: ['config.json'] }, ctx());
    const snap = (await readManifest(layout, 'acme/tiny'))?.snapshots[again.commit];
    expect(snap?.files.map((f) => f.path)).toEqual(['config.json', 'model.safetensors', 'tokenizer/tokenizer.json']);
    expect(snap?.include).toEqual([]);
  });

  it('refuses a file with a flipped byte, deletes it and fetches it again (LFS sha256 and git blob id alike)', async () => {
    hub.corrupt.set('model.safetensors', 1);
    hub.corrupt.set('config.json', 1);
    const r = await pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, ctx());
    expect(r.mismatches).toBe(2);
    expect(hub.downloads('model.safetensors')).toHaveLength(2);
    expect(readFileSync(join(r.snapshotPath, 'model.safetensors')).equals(WEIGHTS)).toBe(true);
    expect(readFileSync(join(r.snapshotPath, 'config.json')).equals(CONFIG)).toBe(true);
  });

  it('never serves a file the hub keeps sending corrupt: no blob, no partial file, no link, the model incomplete', async () => {
    hub.corrupt.set('model.safetensors', 99);
    await expect(pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, ctx())).rejects.toThrow(
      /model\.safetensors: the bytes the hub sent hash to [0-9a-f]{64}, not [0-9a-f]{64}, 2 times; the file was deleted and is not served/,
    );
    const blobs = readdirSync(join(dir, 'hub', 'models--acme--tiny', 'blobs'));
    expect(blobs).not.toContain(sha256(WEIGHTS));
    expect(blobs.filter((b) => b.endsWith('.incomplete'))).toEqual([]);
    const commit = (hub.repos.get('acme/tiny') as { commit: string }).commit;
    expect(existsSync(join(dir, 'hub', 'models--acme--tiny', 'snapshots', commit, 'model.safetensors'))).toBe(false);
    expect(await isModelComplete(layout, 'acme/tiny', 'main')).toBe(false);
    expect((await readManifest(layout, 'acme/tiny'))?.snapshots[commit]?.complete).toBe(false);
  });

  it('downloads each file once when several callers pull one model at the same time', async () => {
    const c = ctx();
    const results = await Promise.all([1, 2, 3, 4].map(() => pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, c)));
    for (const path of ['model.safetensors', 'config.json', 'tokenizer/tokenizer.json']) expect(hub.downloads(path)).toHaveLength(1);
    expect(results.map((r) => r.fetchedBytes).filter((n) => n > 0)).toHaveLength(1);
  });

  it('asks the hub for the revision again after waiting for another pull of the model, whose branch may have moved meanwhile', async () => {
    const name = 'acme/moving';
    const before = fakeRepo(name, [{ path: 'moving.bin', content: bytes(50_000, 40), lfs: true }]);
    const after = { commit: createHash('sha1').update('moved').digest('hex'), files: [{ path: 'moving.bin', content: bytes(50_000, 41), lfs: true }] };
    const asked = () => hub.requests.filter((r) => r.url === `/api/models/${name}/revision/main`).length;
    const until = async (cond: () => boolean, what: string) => {
      for (const end = Date.now() + 15_000; !cond(); await new Promise((r) => setTimeout(r, 10))) if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    };
    hub.repos.set(name, before);
    let open = () => {};
    hub.gates.set('moving.bin', new Promise<void>((r) => (open = r)));
    try {
      const c = ctx();
      const first = pullModel({ repo: name, revision: 'main', include: [] }, c);
      await until(() => hub.downloads('moving.bin').length === 1, 'the first pull downloading');
      const second = pullModel({ repo: name, revision: 'main', include: [] }, c);
      // The second asked at once, beside taking the lock, which the first holds.
      await until(() => asked() === 2, 'the second pull asking the hub');
      hub.repos.set(name, after);
      open();
      const [a, b] = await Promise.all([first, second]);
      expect([a.commit, b.commit]).toEqual([before.commit, after.commit]);
      expect(asked()).toBe(3);
      // Look-alike: a pull that waited for no one asks once.
      hub.requests.length = 0;
      await pullModel({ repo: name, revision: 'main', include: [] }, c);
      expect(asked()).toBe(1);
    } finally {
      open();
      hub.gates.delete('moving.bin');
      hub.repos.delete(name);
    }
  });

  it('evicts the least recently used unpinned model to stay in budget, never a pinned one', async () => {
    const budget = 250_000; // two of the 100 kB models fit, three do not
    await pullModel({ repo: 'acme/a', revision: 'main', include: [] }, ctx(budget));
    await pullModel({ repo: 'acme/b', revision: 'main', include: [] }, ctx(budget));
    // a is the least recently used, but a shard runs on it.
    await pinModel(layout, 'acme/a', 'shard-a-0');
    const events: PullEvent[] = [];
    const r = await pullModel({ repo: 'acme/c', revision: 'main', include: [] }, ctx(budget, events));
    expect(r.evicted).toEqual(['acme/b']);
    expect(events).toContainEqual({ kind: 'evicted', repo: 'acme/b', bytes: 100_000 });
    expect((await scanStore(layout)).map((m) => m.repo)).toEqual(['acme/a', 'acme/c']);
    expect(await isModelComplete(layout, 'acme/a', 'main')).toBe(true);

    // With c pinned too nothing may go: the pull is refused, naming the budget, and nothing is deleted.
    await pinModel(layout, 'acme/c', 'shard-c-0');
    await expect(pullModel({ repo: 'acme/b', revision: 'main', include: [] }, ctx(budget))).rejects.toThrow(
      /acme\/b needs 97\.7 KiB more and models\.budget is 244 KiB: .*\(in use: acme\/a, acme\/c\); raise models\.budget or remove a model/,
    );
    expect((await scanStore(layout)).map((m) => m.repo)).toEqual(['acme/a', 'acme/c']);

    // Once its shard stops, a was used last (the unpin is a use) and c, unpinned too, is older: c goes.
    await unpinModel(layout, 'acme/c', 'shard-c-0');
    await new Promise((r) => setTimeout(r, 20));
    await unpinModel(layout, 'acme/a', 'shard-a-0');
    const again = await pullModel({ repo: 'acme/b', revision: 'main', include: [] }, ctx(budget));
    expect(again.evicted).toEqual(['acme/c']);
  });

  it('counts the compile caches against the budget by the blocks they take, and removes a model\'s with it when it is evicted', async () => {
    const budget = 230_000; // two of the 100 kB models fit beside nothing else; the caches may count up to a quarter (57,500)
    const me = process.geteuid?.() ?? 0;
    await pullModel({ repo: 'acme/a', revision: 'main', include: [] }, ctx(budget));
    // What engines compiled, in nested folders as torch writes them: 35 kB for a model the store does not hold, 10 kB for acme/a.
    const graphs = join(layout.engineCacheDir(me, 'vllm', 'acme/z'), 'vllm', 'torch_compile_cache', 'ab12cd', 'rank_0_0');
    mkdirSync(graphs, { recursive: true });
    writeFileSync(join(graphs, 'graph.py'), bytes(20_000, 1));
    writeFileSync(join(graphs, '..', 'cache_key'), bytes(15_000, 2));
    const ofA = layout.engineCacheDir(me, 'vllm', 'acme/a');
    mkdirSync(ofA, { recursive: true });
    writeFileSync(join(ofA, 'graph.py'), bytes(10_000, 3));
    // Allocated blocks, not sizes: what the files take on this disk.
    const onDisk = (...paths: string[]) => paths.reduce((n, p) => n + lstatSync(p).blocks * 512, 0);
    const ofZ = onDisk(join(graphs, 'graph.py'), join(graphs, '..', 'cache_key'));
    expect(await compileCacheBytes(layout, budget)).toBe(ofZ + onDisk(join(ofA, 'graph.py')));
    // a (100 kB) + b (100 kB) + the caches > 230 kB: a, unpinned and least recently used, goes, and its compile cache with it.
    const r = await pullModel({ repo: 'acme/b', revision: 'main', include: [] }, ctx(budget));
    expect(r.evicted).toEqual(['acme/a']);
    expect(existsSync(ofA)).toBe(false);
    expect(await compileCacheBytes(layout, budget)).toBe(ofZ);
    // With b pinned, c cannot fit beside b and the caches: refused, naming the caches.
    await pinModel(layout, 'acme/b', 'shard-b-0');
    await expect(pullModel({ repo: 'acme/c', revision: 'main', include: [] }, ctx(budget))).rejects.toThrow(
      new RegExp(`and the compile caches ${formatBytes(ofZ).replace('.', '\\.')} \\(.*engines, removed with their model\\) \\(in use: acme/b\\)`),
    );
    expect(cachedModelsView(await scanStore(layout), budget, ofZ).freeBytes).toBe(BigInt(budget - 100_000 - ofZ));
    expect(renderModelsList(await scanStore(layout), budget, ofZ)).toContain(
      `${formatBytes(100_000 + ofZ)} of ${formatBytes(budget)} (models.budget) used, ${formatBytes(ofZ)} of it the engines' compile caches (removed with their model)`,
    );
  });

  it('reports a record\'s refs bounded and checked, and lists them printable (security review 3, S2)', async () => {
    await pullModel({ repo: 'acme/a', revision: 'main', include: [] }, ctx());
    const manifest = JSON.parse(readFileSync(layout.manifestPath('acme/a'), 'utf8')) as { refs: Record<string, string> };
    const commit = manifest.refs.main as string;
    // What a record written by anyone else held: 100,001 refs, one of them terminal escapes.
    for (let i = 0; i < 100_000; i++) manifest.refs[`v${i}`] = commit;
    manifest.refs['\x1b]0;pwned-title\x07\x1b[2J'] = commit;
    writeFileSync(layout.manifestPath('acme/a'), JSON.stringify(manifest));
    const [a] = await scanStore(layout);
    expect(Object.keys(a?.refs ?? {})).toHaveLength(32);
    expect(Object.keys(a?.refs ?? {})).not.toContain('\x1b]0;pwned-title\x07\x1b[2J');
    const table = renderModelsList([{ ...(a as NonNullable<typeof a>), refs: { '\x1b[31mred': commit }, pins: ['\x1b[2J'] }], 1e9);
    expect(table).not.toContain('\x1b');
  });

  it('keeps to the budget when pulls run at once: each plans after the one before has filled its part (security review 3, S10)', async () => {
    const budget = 250_000; // two of the 100 kB models
    const results = await Promise.all(['acme/a', 'acme/b', 'acme/c'].map((repo) => pullModel({ repo, revision: 'main', include: [] }, ctx(budget))));
    const models = await scanStore(layout);
    expect(models.reduce((sum, m) => sum + m.bytes, 0)).toBeLessThanOrEqual(budget);
    expect(results.flatMap((r) => r.evicted)).toHaveLength(1);
  });

  it('sends the token of models.hub.token_file to the hub, and refuses an unreadable one as a config error', async () => {
    const tokenFile = join(dir, 'hf-token');
    writeFileSync(tokenFile, 'hf_secret\n', { mode: 0o600 });
    await pullModel({ repo: 'acme/a', revision: 'main', include: [] }, { ...ctx(), hub: { endpoint: hub.url, tokenFile } });
    expect(hub.requests.map((r) => r.authorization)).toEqual(['Bearer hf_secret', 'Bearer hf_secret']);
    await expect(pullModel({ repo: 'acme/a', revision: 'main', include: [] }, { ...ctx(), hub: { endpoint: hub.url, tokenFile: join(dir, 'none') } })).rejects.toThrow(
      expect.objectContaining({ exitCode: 78, message: expect.stringContaining('models.hub.token_file: cannot read') }),
    );
  });

  it('keeps to models.bandwidth', async () => {
    const started = Date.now();
    const c = { ...ctx(), limiter: new BandwidthLimiter(200_000) };
    await pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, c);
    // 340 kB at 200 kB/s, of which one second's worth (200 kB) may go at once: the rest waits 0.7 s for the bucket.
    expect(Date.now() - started).toBeGreaterThanOrEqual(600);
  });

  it('gives an engine the store as its caches, offline once the model is complete', async () => {
    const engineCacheDir = layout.engineCacheDir(0, 'vllm', 'acme/tiny');
    expect(engineCacheEnv({ cacheDir: dir, modelComplete: await isModelComplete(layout, 'acme/tiny', 'main'), engineCacheDir })).not.toHaveProperty('HF_HUB_OFFLINE');
    await pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, ctx());
    const env = engineCacheEnv({ cacheDir: dir, modelComplete: await isModelComplete(layout, 'acme/tiny', 'main'), engineCacheDir });
    expect(env).toMatchObject({ HF_HUB_CACHE: join(dir, 'hub'), HF_HUB_OFFLINE: '1' });
  });
});

describe('pullModel against a hub it cannot reach', () => {
  it('says which hub, why, and what to check, and writes nothing to the store', async () => {
    // A port nothing listens on: the connect is refused at once.
    const port = await freePort();
    const c = { ...ctx(), hub: { endpoint: `http://127.0.0.1:${port}`, tokenFile: '' } };
    await expect(pullModel({ repo: 'acme/tiny', revision: 'main', include: [] }, c)).rejects.toThrow(
      new RegExp(`^cannot reach the hub at http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED.*; check models\\.hub\\.endpoint and this node's network`),
    );
    expect((await scanStore(layout)).length).toBe(0);
  });
});
