import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { feedEngineHub } from '../../src/models/feed-engine-hub.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { pullModel } from '../../src/models/pull-model.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * feedEngineHub (issue 51): an online start's hub cache gets links to the
 * store's verified blobs of what its loader reads, made as the engine's
 * account when the agent is root; a blob changed in place refuses the start.
 */

const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
const hub = new FakeHub();
hub.repos.set(
  'acme/feed',
  fakeRepo('acme/feed', [
    { path: 'config.json', ...json('{}') },
    { path: 'model.safetensors', content: bytes(50_000, 61), lfs: true },
    { path: 'pytorch_model.bin', content: bytes(50_000, 62), lfs: true },
    { path: 'tokenizer.json', ...json('{"t":1}') },
  ]),
);
let dir: string;
let layout: StoreLayout;
let commit: string;
const NOBODY = 65534;

beforeAll(async () => {
  await hub.start();
  dir = mkdtempSync(join(tmpdir(), 'llmgw-feed-hub-'));
  chmodSync(dir, 0o755);
  layout = new StoreLayout(dir);
  // The .bin twin and the tokenizer left out: partial, with the safetensors and config held.
  await pullModel(
    { repo: 'acme/feed', revision: 'main', include: ['model.safetensors', 'config.json'] },
    { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget: 1e9, concurrency: new ConcurrencyLimit(2), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(10_000) },
  );
  commit = (await readManifest(layout, 'acme/feed'))?.refs.main as string;
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** An engine's own cache folder as prepareEngineCache leaves it: the account's, 0700. */
function engineLeaf(name: string, uid: number): string {
  const leaf = join(dir, 'engines', String(uid), 'vllm', name);
  mkdirSync(join(leaf, '..'), { recursive: true, mode: 0o755 });
  mkdirSync(leaf, { mode: 0o700 });
  chownSync(leaf, uid, uid);
  return leaf;
}

describe('feeding an online start from the store', () => {
  it('links what the loader reads and the store holds, never the .bin twin, and keeps what is there', async () => {
    const leaf = engineLeaf('self', process.getuid?.() ?? 0);
    const hubDir = join(leaf, 'hub');
    const fed = await feedEngineHub({ layout, repo: 'acme/feed', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: hubDir });
    expect(fed?.linked.sort()).toEqual(['config.json', 'model.safetensors']);
    const snap = join(hubDir, 'models--acme--feed', 'snapshots', commit);
    expect(readlinkSync(join(snap, 'model.safetensors'))).toMatch(new RegExp(`^${dir}/hub/models--acme--feed/blobs/[0-9a-f]{64}$`));
    expect(existsSync(join(snap, 'pytorch_model.bin'))).toBe(false);
    // A file the engine downloaded itself is left as it is.
    rmSync(join(snap, 'config.json'));
    writeFileSync(join(snap, 'config.json'), '{"own":1}');
    await feedEngineHub({ layout, repo: 'acme/feed', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: hubDir });
    expect(lstatSync(join(snap, 'config.json')).isSymbolicLink()).toBe(false);
    // Nothing of a model the store does not hold.
    expect(await feedEngineHub({ layout, repo: 'acme/none', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: hubDir })).toBeUndefined();
  });

  it.skipIf(process.getuid?.() !== 0)('as root, links as the engine account: a link it planted to elsewhere is never followed by root', async () => {
    const leaf = engineLeaf('nobody', NOBODY);
    const hubDir = join(leaf, 'hub');
    // The account planted its repo folder as a link to a root-only folder: root would create links inside it.
    const rootOnly = mkdtempSync(join(tmpdir(), 'llmgw-feed-rootonly-'));
    chmodSync(rootOnly, 0o700);
    mkdirSync(hubDir);
    chownSync(hubDir, NOBODY, NOBODY);
    symlinkSync(rootOnly, join(hubDir, 'models--acme--feed'));
    try {
      const fed = await feedEngineHub({ layout, repo: 'acme/feed', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: hubDir, account: { uid: NOBODY, gid: NOBODY } });
      expect(fed?.linked).toEqual([]);
      expect(fed?.error).toMatch(/^could not link the store's files into the engine's hub cache as uid 65534 \(exit 1\): .*EACCES/);
      expect(existsSync(join(rootOnly, 'snapshots'))).toBe(false);
      // Its own folder, without the planted link: linked, the links the account's.
      rmSync(join(hubDir, 'models--acme--feed'));
      const ok = await feedEngineHub({ layout, repo: 'acme/feed', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: hubDir, account: { uid: NOBODY, gid: NOBODY } });
      expect([ok?.error, ok?.linked.length]).toEqual([undefined, 2]);
      expect(lstatSync(join(hubDir, 'models--acme--feed', 'snapshots', commit, 'model.safetensors')).uid).toBe(NOBODY);
    } finally {
      rmSync(rootOnly, { recursive: true, force: true });
    }
  });

  it('refuses, naming the file, when a blob held was changed in place since it was verified', async () => {
    const leaf = engineLeaf('changed', process.getuid?.() ?? 0);
    const m = await readManifest(layout, 'acme/feed');
    const f = m?.snapshots[commit]?.files.find((x) => x.path === 'model.safetensors');
    const blob = layout.blobPath('acme/feed', f?.etag as string);
    writeFileSync(blob, bytes(50_000, 99));
    await expect(feedEngineHub({ layout, repo: 'acme/feed', revision: 'main', rule: { engine: 'vllm' }, engineHubDir: join(leaf, 'hub') })).rejects.toThrow(/model\.safetensors of acme\/feed@main .*changed in place/);
  });
});
