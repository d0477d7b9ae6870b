import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EngineRegistry } from '../../src/agent/engines/engine-registry.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { pullModel } from '../../src/models/pull-model.js';
import { revisionOf } from '../../src/models/judge-offline-start.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { context, shard } from '../agent/engines/engine-fixtures.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

const hub = new FakeHub();
hub.repos.set('acme/tiny', fakeRepo('acme/tiny', [{ path: 'model.safetensors', content: bytes(50_000, 3), lfs: true }]));
let dir: string;

beforeAll(async () => {
  await hub.start();
  dir = mkdtempSync(join(tmpdir(), 'llmgw-models-wiring-'));
  await pullModel(
    { repo: 'acme/tiny', revision: 'main', include: [] },
    {
      layout: new StoreLayout(dir),
      hub: { endpoint: hub.url, tokenFile: '' },
      budget: 1e9,
      concurrency: new ConcurrencyLimit(2),
      limiter: new BandwidthLimiter(undefined),
      signal: AbortSignal.timeout(10_000),
    },
  );
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

function registry(modelsCacheDir?: string): EngineRegistry {
  return new EngineRegistry({ engines: { vllm: { command: [process.execPath], env: {}, extraArgs: [], allowedEnv: ['HF_*'], enabled: true } }, mgmtInterface: 'eth0', modelsCacheDir });
}

describe('an engine started on a node with a model store', () => {
  it('gets the store as its caches and runs offline when its model is complete there', async () => {
    const engine = registry(dir).get('vllm');
    const spec = shard({ profile: { model: 'acme/tiny' } });
    await engine.validate(spec, context());
    const { env } = engine.command(spec);
    const own = join(dir, 'engines', String(context().agentUid), 'vllm', 'models--acme--tiny');
    expect(env).toMatchObject({ HF_HUB_CACHE: join(dir, 'hub'), VLLM_CACHE_ROOT: join(own, 'vllm'), HF_HUB_OFFLINE: '1' });
    // Made for the engine before its start: its one writable folder in the store.
    expect(statSync(own).isDirectory()).toBe(true);
    // Nothing asked the hub at start: the pull's requests are all it saw.
    expect(hub.requests.filter((r) => r.url.includes('/resolve/'))).toHaveLength(1);
  });

  it('stays online for a model the store does not have whole, or at another revision, downloading into a hub cache of its own', async () => {
    const engine = registry(dir).get('vllm');
    for (const profile of [{ model: 'acme/other' }, { model: 'acme/tiny', args: ['--revision', 'v2'] }]) {
      const spec = shard({ profile });
      await engine.validate(spec, context());
      const { env } = engine.command(spec);
      // The store is read-only to engines: an online one downloads into its own folder.
      expect(env.HF_HUB_CACHE).toBe(join(dir, 'engines', String(context().agentUid), 'vllm', profile.model === 'acme/other' ? 'models--acme--other' : 'models--acme--tiny', 'hub'));
      expect(env).not.toHaveProperty('HF_HUB_OFFLINE');
    }
  });

  it('is given none of it without a store, and the operator env still wins', async () => {
    const spec = shard({ profile: { model: 'acme/tiny' } });
    const bare = registry().get('vllm');
    await bare.validate(spec, context());
    expect(bare.command(spec).env).not.toHaveProperty('HF_HUB_CACHE');
    const own = new EngineRegistry({
      engines: { vllm: { command: [process.execPath], env: { HF_HUB_OFFLINE: '0' }, extraArgs: [], allowedEnv: ['HF_*'], enabled: true } },
      mgmtInterface: 'eth0',
      modelsCacheDir: dir,
    }).get('vllm');
    await own.validate(spec, context());
    expect(own.command(spec).env.HF_HUB_OFFLINE).toBe('0');
  });

  it('reads the revision from the profile args as vLLM does', () => {
    expect([revisionOf([]), revisionOf(['--revision', 'v1']), revisionOf(['--revision=abc'])]).toEqual(['main', 'v1', 'abc']);
  });
});
