import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { revisionKey, revisionViews } from '../../src/agent/models/revision-views.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { judgeOfflineStart } from '../../src/models/judge-offline-start.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { modelBlobFiles, pageCacheResidency } from '../../src/models/page-cache.js';
import { pullModel } from '../../src/models/pull-model.js';
import { scanStore } from '../../src/models/scan-store.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { loaderFilesFirst } from '../../src/models/warm-model.js';
import { dropFromPageCache } from '../helpers/drop-page-cache.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * Issue 51: "complete" is what the engine's loader reads at the revision
 * (loader-files.ts). A Llama-style repo ships original/ and a .bin twin
 * beside indexed safetensors; a pull that left those out starts offline, a
 * pull of *.json alone is never complete, and residency is counted over
 * the safetensors only.
 */

const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
const shard1 = bytes(300_000, 1);
const shard2 = bytes(200_000, 2);
const hub = new FakeHub();
hub.repos.set(
  'acme/llama',
  fakeRepo('acme/llama', [
    { path: 'config.json', ...json('{"architectures":["LlamaForCausalLM"]}') },
    { path: 'generation_config.json', ...json('{}') },
    { path: 'model-00001-of-00002.safetensors', content: shard1, lfs: true },
    { path: 'model-00002-of-00002.safetensors', content: shard2, lfs: true },
    { path: 'model.safetensors.index.json', ...json('{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}') },
    { path: 'pytorch_model.bin', content: bytes(500_000, 3), lfs: true },
    { path: 'original/consolidated.00.pth', content: bytes(400_000, 4), lfs: true },
    { path: 'original/params.json', ...json('{}') },
    { path: 'tokenizer.json', ...json('{"t":1}') },
    { path: 'tokenizer_config.json', ...json('{}') },
    { path: 'README.md', ...json('# card') },
  ]),
);
let dir: string;
let layout: StoreLayout;

async function pull(include: string[]): Promise<void> {
  await pullModel(
    { repo: 'acme/llama', revision: 'main', include },
    { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget: 1e9, concurrency: new ConcurrencyLimit(2), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(10_000) },
  );
}

async function view() {
  return (await revisionViews(layout, await scanStore(layout))).get(revisionKey('acme/llama', 'main'));
}

beforeAll(async () => {
  await hub.start();
  dir = mkdtempSync(join(tmpdir(), 'llmgw-loader-store-'));
  layout = new StoreLayout(dir);
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('a store judged by what the loader reads', () => {
  it('never calls a *.json-only pull complete, and names the weights it lacks', async () => {
    await pull(['*.json']);
    expect((await scanStore(layout))[0]?.completeCommits).toHaveLength(1);
    expect(await view()).toMatchObject({ complete: false, digest: '' });
    const judged = await judgeOfflineStart(dir, 'acme/llama', []);
    expect(judged).toEqual({ offline: false, reason: 'acme/llama@main was pulled with --include *.json, which left out model-00001-of-00002.safetensors, model-00002-of-00002.safetensors', storeShort: true, shortRepos: ['acme/llama'] });
  });

  it('starts offline from a pull that left out original/ and the .bin twin, on both engines', async () => {
    await pull(['*.safetensors', '*.json', 'tokenizer*']);
    expect(await judgeOfflineStart(dir, 'acme/llama', [], [], 'vllm')).toEqual({ offline: true });
    expect(await judgeOfflineStart(dir, 'acme/llama', [], [], 'sglang')).toEqual({ offline: true });
    const v = await view();
    expect(v?.complete).toBe(true);
    expect(v?.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The safetensors and the small files, not the .bin or original/ (never pulled here anyway).
    expect(v?.loadBytes).toBeGreaterThanOrEqual(shard1.length + shard2.length);
    expect(v?.loadBytes).toBeLessThan(shard1.length + shard2.length + 1000);
  });

  it('follows --load-format: safetensors reads the same; a format it cannot judge counts every file, so the left-out ones', async () => {
    expect(await judgeOfflineStart(dir, 'acme/llama', ['--load-format', 'safetensors'], [], 'vllm')).toEqual({ offline: true });
    const judged = await judgeOfflineStart(dir, 'acme/llama', ['--load-format=bitsandbytes'], [], 'vllm');
    expect(judged).toMatchObject({ offline: false, reason: expect.stringContaining('left out pytorch_model.bin, original/consolidated.00.pth') });
  });

  it('counts residency over the safetensors of a repo shipping both formats, and warms them first', async () => {
    await pull([]);
    const v = await view();
    if (!v) throw new Error('no view');
    expect(v.complete).toBe(true);
    const manifest = await readManifest(layout, 'acme/llama');
    const commit = manifest?.refs.main as string;
    const etagOf = (p: string) => manifest?.snapshots[commit]?.files.find((f) => f.path === p)?.etag as string;
    const bin = layout.blobPath('acme/llama', etagOf('pytorch_model.bin'));
    const pth = layout.blobPath('acme/llama', etagOf('original/consolidated.00.pth'));
    expect(v.blobPaths).not.toContain(bin);
    expect(v.blobPaths).not.toContain(pth);
    await dropFromPageCache([bin, pth]);
    const all = await modelBlobFiles(layout, 'acme/llama');
    const whole = await pageCacheResidency(all.map((f) => f.path));
    const loaded = await pageCacheResidency(v.blobPaths);
    // The old measure (every blob) stays under the rung's 90 %; the loader's files are all in memory (just written).
    expect(whole.residentBytes / whole.bytes).toBeLessThan(0.9);
    expect(loaded.residentBytes / v.loadBytes).toBeGreaterThanOrEqual(0.9);
    const order = (await loaderFilesFirst(layout, 'acme/llama', all, await readManifest(layout, 'acme/llama'))).map((f) => f.path);
    expect(order.slice(0, v.blobPaths.length).sort()).toEqual([...v.blobPaths].sort());
  });
});
