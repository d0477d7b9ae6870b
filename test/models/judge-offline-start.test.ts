import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hubReposIn } from '../../src/agent/engines/code-loading-args.js';
import { SGLANG_CODE_LOADING_ARGS } from '../../src/agent/engines/sglang/sglang-args.js';
import { VLLM_CODE_LOADING_ARGS } from '../../src/agent/engines/vllm/vllm-args.js';
import { EngineRegistry } from '../../src/agent/engines/engine-registry.js';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import { ConcurrencyLimit } from '../../src/models/concurrency-limit.js';
import { readManifest, writeManifest } from '../../src/models/model-manifest.js';
import { offlineProblem } from '../../src/models/offline-problem.js';
import { pullModel } from '../../src/models/pull-model.js';
import { judgeOfflineStart } from '../../src/models/judge-offline-start.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { context, shard } from '../agent/engines/engine-fixtures.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * Offline only when the whole start is local (engine-fidelity review 2, N4):
 * a model pulled with --include, or a profile naming a tokenizer or draft
 * repo the store lacks, starts online.
 */

const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
const hub = new FakeHub();
hub.repos.set(
  'acme/full',
  fakeRepo('acme/full', [
    { path: 'model.safetensors', content: bytes(20_000, 5), lfs: true },
    { path: 'config.json', ...json('{"a":1}') },
    { path: 'tokenizer_config.json', ...json('{}') },
    { path: 'tokenizer.json', ...json('{"t":1}') },
    { path: 'README.md', ...json('# card') },
  ]),
);
hub.repos.set('acme/tok', fakeRepo('acme/tok', [{ path: 'tokenizer_config.json', ...json('{"x":2}') }, { path: 'tokenizer.json', ...json('{"t":2}') }]));
let dir: string;
let layout: StoreLayout;

async function pull(repo: string, include: string[] = []): Promise<void> {
  await pullModel(
    { repo, revision: 'main', include },
    { layout, hub: { endpoint: hub.url, tokenFile: '' }, budget: 1e9, concurrency: new ConcurrencyLimit(2), limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(10_000) },
  );
}

beforeAll(async () => {
  await hub.start();
  dir = mkdtempSync(join(tmpdir(), 'llmgw-offline-start-'));
  layout = new StoreLayout(dir);
});
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('offlineProblem: whether a pulled model holds everything an engine reads at start', () => {
  it('judges a real pull with --include by the files it left out (the pull records the repo listing), never the model card', async () => {
    await pull('acme/full', ['*.safetensors']);
    expect(await offlineProblem(layout, 'acme/full', 'main')).toBe('acme/full@main was pulled with --include *.safetensors, which left out config.json, tokenizer_config.json, tokenizer.json');
    await pull('acme/full', ['*.safetensors', '*.json']);
    expect(await offlineProblem(layout, 'acme/full', 'main')).toBeUndefined();
    const manifest = await readManifest(layout, 'acme/full');
    const commit = manifest?.refs.main as string;
    expect(manifest?.snapshots[commit]?.repoFiles).toEqual(['model.safetensors', 'config.json', 'tokenizer_config.json', 'tokenizer.json', 'README.md']);
    await pull('acme/full');
    expect(await offlineProblem(layout, 'acme/full', 'main')).toBeUndefined();
    expect(await offlineProblem(layout, 'acme/none', 'main')).toBe("acme/none@main is not complete in the node's model store");
  });

  it('counts a pull with --include as partial when its manifest predates the repo listing', async () => {
    const manifest = await readManifest(layout, 'acme/full');
    const commit = manifest?.refs.main as string;
    const snap = manifest?.snapshots[commit];
    if (!manifest || !snap) throw new Error('no manifest');
    try {
      const { repoFiles: _dropped, ...older } = snap;
      manifest.snapshots[commit] = { ...older, include: ['*.safetensors', '*.json'], files: snap.files.filter((f) => f.path !== 'README.md') };
      await writeManifest(layout, manifest);
      expect(await offlineProblem(layout, 'acme/full', 'main')).toBe(
        'acme/full@main was pulled with --include *.safetensors *.json, so files the engine reads at start (tokenizer, chat template) may be missing from the store',
      );
    } finally {
      manifest.snapshots[commit] = snap;
      await writeManifest(layout, manifest);
    }
  });
});

describe('judgeOfflineStart: the model and every other hub repo the profile names', () => {
  it('starts online while a --tokenizer repo is not in the store, offline once it is; a local path needs nothing', async () => {
    const others = hubReposIn(['--tokenizer', 'acme/tok'], VLLM_CODE_LOADING_ARGS);
    expect(await judgeOfflineStart(dir, 'acme/full', [], others)).toEqual({ offline: false, reason: "--tokenizer acme/tok@main is not complete in the node's model store", storeShort: true, shortRepos: ['acme/tok'] });
    await pull('acme/tok');
    expect(await judgeOfflineStart(dir, 'acme/full', [], others)).toEqual({ offline: true });
    expect(await judgeOfflineStart(dir, 'acme/full', [], hubReposIn(['--tokenizer=/models/tok'], VLLM_CODE_LOADING_ARGS))).toEqual({ offline: true });
    // A local path is not the store's to hold: no shortfall a node without a hub refuses (start-admission.ts refuseWithoutHub).
    const local = await judgeOfflineStart(dir, '/models/x', []);
    expect(local).toMatchObject({ offline: false, reason: expect.stringContaining('is not a hub repo id') });
    expect(local).not.toHaveProperty('storeShort');
  });

  it('reads each repo at the revision its engine does', () => {
    expect(hubReposIn(['--tokenizer', 'a/t', '--revision', 'v1', '--tokenizer-revision', 'v2', '--hf-config-path', 'a/c', '--generation-config', 'auto'], VLLM_CODE_LOADING_ARGS)).toEqual([
      { namedBy: '--tokenizer', value: 'a/t', revision: 'v2' },
      { namedBy: '--hf-config-path', value: 'a/c', revision: 'v1' },
      { namedBy: '--generation-config', value: 'auto', revision: 'main' },
    ]);
    // A draft model inside --speculative-config, which only an operator's allowed_args lets through.
    expect(hubReposIn(['-sc', '{"model": "a/d", "revision": "v3", "num_speculative_tokens": 4}'], VLLM_CODE_LOADING_ARGS)).toEqual([{ namedBy: '--speculative-config', value: 'a/d', revision: 'v3' }]);
    expect(hubReposIn(['--speculative_config.model', 'a/d'], VLLM_CODE_LOADING_ARGS)).toEqual([{ namedBy: '--speculative-config', value: 'a/d', revision: 'main' }]);
    expect(hubReposIn(['--speculative-config', '{"method": "ngram"}'], VLLM_CODE_LOADING_ARGS)).toEqual([]);
    // `--tokenizer` begins `--tokenizer-revision` but is its own option.
    expect(hubReposIn(['--tokenizer', 'a/t', '--revision', 'v1'], VLLM_CODE_LOADING_ARGS)).toEqual([{ namedBy: '--tokenizer', value: 'a/t', revision: 'main' }]);
    expect(hubReposIn(['--tokenizer-path', 'a/t', '--revision', 'v1', '--speculative-draft-model', 'a/d'], SGLANG_CODE_LOADING_ARGS)).toEqual([
      { namedBy: '--tokenizer-path', value: 'a/t', revision: 'v1' },
      { namedBy: '--speculative-draft-model-path', value: 'a/d', revision: 'main' },
    ]);
  });
});

describe('an engine on a node with a store', () => {
  function engine(name: 'vllm' | 'sglang') {
    return new EngineRegistry({ engines: { [name]: { command: [process.execPath], env: {}, extraArgs: [], allowedEnv: ['HF_*'], enabled: true } }, mgmtInterface: 'eth0', modelsCacheDir: dir }).get(name);
  }

  it('starts an SGLang draft model online until the draft is pulled, and says why', async () => {
    const e = engine('sglang');
    const spec = shard({ profile: { engine: 'sglang', model: 'acme/full', args: ['--speculative-draft-model-path', 'acme/draft'] } });
    await e.validate(spec, context());
    expect(e.command(spec).env).not.toHaveProperty('HF_HUB_OFFLINE');
    // The model itself, complete, is fed into the engine's own hub cache: online, it fetches only the draft (issue 51).
    expect(e.onlineReason?.(spec)).toBe("--speculative-draft-model-path acme/draft@main is not complete in the node's model store; 4 files of acme/full linked from the store into its hub cache, the rest fetched");
    const plain = shard({ profile: { engine: 'sglang', model: 'acme/full' } });
    await e.validate(plain, context());
    expect(e.command(plain).env.HF_HUB_OFFLINE).toBe('1');
    expect(e.onlineReason?.(plain)).toBeUndefined();
  });
});
