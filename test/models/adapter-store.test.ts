import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resolveStoreAdapter } from '../../src/models/adapters/resolve-adapter.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { pinModel, unpinModel } from '../../src/models/model-pins.js';
import { removeModelOrFail } from '../../src/models/remove-model.js';
import { scanStore } from '../../src/models/scan-store.js';
import { type PullContext, pullModel } from '../../src/models/pull-model.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { adapterConfigText, fakeAdapterRepo } from '../helpers/fake-adapter-repo.js';
import { FakeHub, bytes, fakeRepo, gitBlobId, sha256 } from './fake-hub.js';

const hub = new FakeHub();
const WEIGHTS = bytes(50_000, 31);
hub.repos.set('acme/lora-a', fakeAdapterRepo('acme/lora-a', { base: 'acme/base', rank: 16, weights: WEIGHTS, more: [{ path: 'README.md', content: Buffer.from('# lora a\n'), lfs: false }] }));
// The same bytes under another name, and one byte apart under a third.
hub.repos.set('acme/lora-twin', fakeAdapterRepo('acme/lora-twin', { base: 'acme/base', rank: 16, weights: WEIGHTS }));
hub.repos.set('acme/lora-other', fakeAdapterRepo('acme/lora-other', { base: 'acme/base', rank: 16, weights: Buffer.concat([WEIGHTS.subarray(0, 49_999), Buffer.from([WEIGHTS[49_999] ^ 1])]) }));
hub.repos.set('acme/lora-bin', fakeAdapterRepo('acme/lora-bin', { weightsName: 'adapter_model.bin' }));
hub.repos.set('acme/lora-noweights', fakeAdapterRepo('acme/lora-noweights', { weightsName: null, more: [{ path: 'lora.safetensors', content: bytes(10_000, 3), lfs: true }] }));
hub.repos.set('acme/lora-norank', fakeAdapterRepo('acme/lora-norank', { config: adapterConfigText('acme/base', undefined) }));
hub.repos.set('acme/lora-nobase', fakeAdapterRepo('acme/lora-nobase', { config: adapterConfigText(undefined, 8) }));
hub.repos.set('acme/lora-2m', fakeAdapterRepo('acme/lora-2m', { weights: bytes(2 * 1024 * 1024, 6), weightsName: 'adapter_model.bin' }));
hub.repos.set('acme/lora-big', fakeAdapterRepo('acme/lora-big', { weights: bytes(400_000, 5) }));
hub.repos.set('acme/model', fakeRepo('acme/model', [
  { path: 'config.json', content: Buffer.from('{"architectures":["LlamaForCausalLM"]}\n'), lfs: false },
  { path: 'model.safetensors', content: bytes(60_000, 9), lfs: true },
  // An adapter in a subfolder does not make the repo one: the loaders read the top level.
  { path: 'extra/adapter_config.json', content: adapterConfigText('acme/base', 8), lfs: false },
]));

let dir: string;
let layout: StoreLayout;

function ctx(budget = 10_000_000): PullContext {
  return { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget, concurrency: new ConcurrencyLimit(4), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(20_000) };
}
const pull = (repo: string, o: { budget?: number; include?: string[] } = {}) => pullModel({ repo, revision: 'main', include: o.include ?? [] }, ctx(o.budget));

/** Every byte under the store's hub cache and manifests, the lock files aside. */
function storeFiles(): string[] {
  if (!existsSync(dir)) return [];
  return (readdirSync(dir, { recursive: true }) as string[]).filter((p) => !p.startsWith(join('llmgw', 'locks')) && statSync(join(dir, p)).isFile());
}

beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-adapters-'));
  layout = new StoreLayout(dir);
  hub.requests.length = 0;
  hub.trickle.clear();
  hub.corrupt.clear();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('an adapter pulled into the store', () => {
  it('is pulled verified like a model, recorded as an adapter with its base and rank, and resolves to the store snapshot with its content digest', async () => {
    const r = await pull('acme/lora-a');
    expect(r.adapter).toEqual({ baseModel: 'acme/base', rank: 16, features: { useDora: false, modulesToSave: false, bias: 'none' } });
    const m = await readManifest(layout, 'acme/lora-a');
    expect([m?.kind, m?.adapter, m?.snapshots[r.commit]?.adapter, m?.snapshots[r.commit]?.complete]).toEqual(['adapter', { baseModel: 'acme/base', rank: 16 }, { baseModel: 'acme/base', rank: 16 }, true]);
    const a = await resolveStoreAdapter(layout, 'acme/lora-a', 'main');
    const config = hub.repos.get('acme/lora-a')?.files[0]?.content as Buffer;
    // The digest scheme of a model's content_digest, over what the LoRA loaders read: the README is not in it.
    const lines = [`adapter_config.json ${gitBlobId(config)}\n`, `adapter_model.safetensors ${sha256(WEIGHTS)}\n`].sort().join('');
    expect(a).toEqual({
      repo: 'acme/lora-a',
      revision: 'main',
      commit: r.commit,
      dir: layout.snapshotDir('acme/lora-a', r.commit),
      digest: `sha256:${createHash('sha256').update(lines).digest('hex')}`,
      baseModel: 'acme/base',
      rank: 16,
      features: { useDora: false, modulesToSave: false, bias: 'none' },
      bytes: config.length + WEIGHTS.length,
    });
    expect(a.dir).toBe(join(dir, 'hub', 'models--acme--lora-a', 'snapshots', r.commit));
    expect(readFileSync(join(a.dir, 'adapter_model.safetensors')).equals(WEIGHTS)).toBe(true);
    // Resolved by the commit too.
    expect((await resolveStoreAdapter(layout, 'acme/lora-a', r.commit)).digest).toBe(a.digest);
  });

  it('is identified by its bytes: the same bytes under another name agree, one byte apart do not', async () => {
    for (const repo of ['acme/lora-a', 'acme/lora-twin', 'acme/lora-other']) await pull(repo);
    const [a, twin, other] = await Promise.all(['acme/lora-a', 'acme/lora-twin', 'acme/lora-other'].map((repo) => resolveStoreAdapter(layout, repo, 'main')));
    expect(twin?.digest).toBe(a?.digest);
    expect(other?.digest).not.toBe(a?.digest);
  });

  it('takes adapter_model.bin when there is no safetensors (what vLLM loads next), and refuses an adapter with neither, naming the file, before a byte is written', async () => {
    await pull('acme/lora-bin');
    expect((await resolveStoreAdapter(layout, 'acme/lora-bin', 'main')).bytes).toBeGreaterThan(50_000);
    rmSync(dir, { recursive: true, force: true });
    hub.requests.length = 0;
    // lora.safetensors is what SGLang's glob would take, but vLLM opens adapter_model.* by name only.
    await expect(pull('acme/lora-noweights')).rejects.toThrow(
      /^acme\/lora-noweights@main is an incomplete LoRA adapter: the revision has no adapter_model\.safetensors \(nor adapter_model\.bin nor adapter_model\.pt, which vLLM reads instead\), which vLLM and SGLang load; .*$/,
    );
    expect(storeFiles()).toEqual([]);
    expect(hub.requests.filter((q) => q.url.includes('/resolve/'))).toEqual([]);
  });

  it('refuses an --include that leaves out the weights, naming them; one that keeps them pulls', async () => {
    await expect(pull('acme/lora-a', { include: ['*.json'] })).rejects.toThrow(/^--include leaves out adapter_model\.safetensors of the LoRA adapter acme\/lora-a@main, which vLLM and SGLang load; /);
    expect(storeFiles()).toEqual([]);
    const r = await pull('acme/lora-a', { include: ['adapter_*'] });
    expect(r.files).toBe(2);
    expect((await resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rank).toBe(16);
  });

  it('refuses a config the loaders would refuse (no r, no base) after fetching only the config; one with both pulls', async () => {
    await expect(pull('acme/lora-norank')).rejects.toThrow(/^acme\/lora-norank@main's adapter_config\.json has no r; vLLM and SGLang would refuse to load it$/);
    expect(hub.downloads('adapter_model.safetensors')).toEqual([]);
    expect(hub.downloads('adapter_config.json')).toHaveLength(1);
    await expect(pull('acme/lora-nobase')).rejects.toThrow(/^acme\/lora-nobase@main's adapter_config\.json has no base_model_name_or_path; /);
    expect(hub.downloads('adapter_model.safetensors')).toEqual([]);
    // The look-alike: the same shape with r and base.
    await pull('acme/lora-a');
    expect(hub.downloads('adapter_model.safetensors')).toHaveLength(1);
  });
});

describe('an adapter pull, like a model pull', () => {
  it('resumes after it was stopped mid-file and refuses a corrupt download, fetching it again; the digest is the same', async () => {
    // One stream (under RANGED_MIN_BYTES) of 16 KiB a tick: at least 2.5 s for the file, 64 KiB of it seen long before.
    hub.trickle.set('adapter_model.bin', 16 * 1024);
    const stop = new AbortController();
    const incomplete = layout.incompletePath('acme/lora-2m', sha256(hub.repos.get('acme/lora-2m')?.files[1]?.content as Buffer));
    const first = pullModel({ repo: 'acme/lora-2m', revision: 'main', include: [] }, { ...ctx(), signal: stop.signal });
    const end = Date.now() + 20_000;
    while (!(existsSync(incomplete) && statSync(incomplete).size >= 64 * 1024)) {
      if (Date.now() > end) throw new Error('no part of adapter_model.bin on disk within 20 s');
      await new Promise((r) => setTimeout(r, 20));
    }
    stop.abort();
    await expect(first).rejects.toThrow();
    await expect(resolveStoreAdapter(layout, 'acme/lora-2m', 'main')).rejects.toThrow(/^the LoRA adapter acme\/lora-2m@main is not in the model store \(a pull of acme\/lora-2m did not finish\); pull it first /);
    hub.trickle.clear();
    hub.corrupt.set('adapter_model.bin', 1);
    const r = await pull('acme/lora-2m');
    expect(r.resumedBytes).toBeGreaterThan(0);
    expect(r.mismatches).toBe(1);
    const a = await resolveStoreAdapter(layout, 'acme/lora-2m', 'main');
    rmSync(dir, { recursive: true, force: true });
    await pull('acme/lora-2m');
    expect((await resolveStoreAdapter(layout, 'acme/lora-2m', 'main')).digest).toBe(a.digest);
  });
});

describe('resolveStoreAdapter refuses', () => {
  it('an adapter not in the store, and a revision of it not pulled, in one line', async () => {
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/^the LoRA adapter acme\/lora-a@main is not in the model store; pull it first \(llmgw models pull acme\/lora-a --revision main\)$/);
    await pull('acme/lora-a');
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'v2')).rejects.toThrow(/^the LoRA adapter acme\/lora-a@v2 is not in the model store; /);
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).resolves.toMatchObject({ rank: 16 });
  });

  it('a model, even one with an adapter_config.json in a subfolder: not an adapter', async () => {
    await pull('acme/model');
    await expect(resolveStoreAdapter(layout, 'acme/model', 'main')).rejects.toThrow(/^acme\/model@main is not a LoRA adapter: it has no top-level adapter_config\.json /);
    expect((await readManifest(layout, 'acme/model'))?.kind).toBeUndefined();
  });

  it('an adapter whose weights were deleted from the store, naming the file; the intact one resolves', async () => {
    const r = await pull('acme/lora-a');
    await pull('acme/lora-twin');
    unlinkSync(layout.blobPath('acme/lora-a', sha256(WEIGHTS)));
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(
      /^the LoRA adapter acme\/lora-a@main is incomplete in the model store: its adapter_model\.safetensors blob is missing; pull it again \(llmgw models pull acme\/lora-a --revision main\)$/,
    );
    await expect(resolveStoreAdapter(layout, 'acme/lora-twin', 'main')).resolves.toMatchObject({ rank: 16 });
    // Pulled again, it resolves.
    await pull('acme/lora-a');
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).resolves.toMatchObject({ commit: r.commit });
  });

  it('an adapter whose bytes changed in place since they were verified', async () => {
    await pull('acme/lora-a');
    const blob = layout.blobPath('acme/lora-a', sha256(WEIGHTS));
    await resolveStoreAdapter(layout, 'acme/lora-a', 'main');
    const changed = Buffer.from(WEIGHTS);
    changed[10] = (changed[10] as number) ^ 1;
    writeFileSync(blob, changed);
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/^the store's adapter_model\.safetensors of acme\/lora-a@main \(.*\) changed in place since it was verified/);
  });

  it('a repo or revision that escapes, a record pointing out of the store, and a snapshot folder swapped for a link; the store\'s own resolves', async () => {
    const r = await pull('acme/lora-a');
    for (const [repo, rev] of [['../acme', 'main'], ['acme/..', 'main'], ['acme/lora-a', '../../../etc'], ['/etc/passwd', 'main'], ['acme/lora-a', '/tmp']]) {
      await expect(resolveStoreAdapter(layout, repo as string, rev as string)).rejects.toThrow(/is not a hub model id|may not contain|is not a branch, tag or commit/);
    }
    // A manifest edited to send main anywhere but a 40-hex commit is no revision of the store.
    const path = layout.manifestPath('acme/lora-a');
    const m = JSON.parse(readFileSync(path, 'utf8')) as { refs: Record<string, string> };
    writeFileSync(path, JSON.stringify({ ...m, refs: { main: '../../../../tmp' } }));
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/is not in the model store/);
    // One naming a blob by a path rather than a digest.
    const files = (m as unknown as { snapshots: Record<string, { files: { path: string; etag: string }[] }> }).snapshots[r.commit]?.files ?? [];
    writeFileSync(path, JSON.stringify({ ...m, snapshots: { [r.commit]: { ...(m as unknown as { snapshots: Record<string, object> }).snapshots[r.commit], files: files.map((f) => ({ ...f, etag: f.path === 'adapter_model.safetensors' ? '../../../../../etc/passwd' : f.etag })) } } }));
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/names adapter_model\.safetensors's blob "\.\.\/.*", not a digest; refused/);
    writeFileSync(path, JSON.stringify(m));
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).resolves.toMatchObject({ commit: r.commit });
    // The snapshot folder replaced by a link to a folder someone else filled.
    const snap = layout.snapshotDir('acme/lora-a', r.commit);
    const elsewhere = mkdtempSync(join(tmpdir(), 'llmgw-elsewhere-'));
    try {
      rmSync(snap, { recursive: true });
      symlinkSync(elsewhere, snap);
      await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/is not a folder of the store \(a link or a file put there\); refused/);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
    unlinkSync(snap);
    await pull('acme/lora-a');
    expect((await resolveStoreAdapter(layout, 'acme/lora-a', 'main')).dir).toBe(snap);
  });
});

describe('an adapter in the budget', () => {
  it('larger than the whole budget is refused in one line before a byte is written or a model evicted; one that fits evicts the least recently used', async () => {
    await pull('acme/lora-a', { budget: 300_000 });
    const before = storeFiles();
    await expect(pull('acme/lora-big', { budget: 300_000 })).rejects.toThrow(
      /^acme\/lora-big@main is 391 KiB \(a LoRA adapter\), more than all of models\.budget \(293 KiB\): it can never fit, nothing was fetched or evicted; raise models\.budget$/,
    );
    expect(storeFiles()).toEqual(before);
    expect(existsSync(layout.repoDir('acme/lora-big'))).toBe(false);
    expect(hub.downloads('adapter_model.safetensors')).toHaveLength(1);
    // The look-alike: it fits the budget once lora-a (least recently used, unpinned) goes.
    const r = await pull('acme/lora-big', { budget: 450_000 });
    expect(r.evicted).toEqual(['acme/lora-a']);
    expect((await resolveStoreAdapter(layout, 'acme/lora-big', 'main')).bytes).toBeGreaterThan(400_000);
  });

  it('pinned by a shard is neither evicted nor removed; unpinned it is, like a model', async () => {
    await pull('acme/lora-a', { budget: 300_000 });
    await pinModel(layout, 'acme/lora-a', 'shard-1');
    await expect(pull('acme/lora-big', { budget: 450_000 })).rejects.toThrow(/\(in use: acme\/lora-a\); raise models\.budget or remove a model$/);
    await expect(removeModelOrFail(layout, 'acme/lora-a')).rejects.toThrow(/^acme\/lora-a is not removed: pinned by shard-1; /);
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).resolves.toMatchObject({ rank: 16 });
    await unpinModel(layout, 'acme/lora-a', 'shard-1');
    await removeModelOrFail(layout, 'acme/lora-a');
    await expect(resolveStoreAdapter(layout, 'acme/lora-a', 'main')).rejects.toThrow(/is not in the model store/);
  });

  it('is scanned as an adapter with its base and rank, a model as a model', async () => {
    await pull('acme/lora-a');
    await pull('acme/model');
    const byRepo = new Map((await scanStore(layout)).map((m) => [m.repo, m]));
    expect(byRepo.get('acme/lora-a')).toMatchObject({ kind: 'adapter', baseModel: 'acme/base', rank: 16, complete: true });
    expect(byRepo.get('acme/model')).toMatchObject({ kind: 'model', complete: true });
    expect(byRepo.get('acme/model')).not.toHaveProperty('rank');
    // A record written by anyone else: a base with escapes, a rank that is no rank, is not shown.
    const path = layout.manifestPath('acme/lora-a');
    const m = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
    writeFileSync(path, JSON.stringify({ ...m, adapter: { baseModel: '\x1b[2Jx', rank: -1 } }));
    const [a] = (await scanStore(layout)).filter((x) => x.repo === 'acme/lora-a');
    expect(a).toMatchObject({ kind: 'adapter' });
    expect(a).not.toHaveProperty('baseModel');
  });
});
