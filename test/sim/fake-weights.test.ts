import { mkdirSync, mkdtempSync, rmSync, symlinkSync, unlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { MissingWeightsError, compileMarkerPath, readWeights } from '../../src/sim/fake-weights.js';
import { freePort } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, killFakeEngines, outputMatches, startFakeEngine } from '../helpers/fake-engines.js';

/*
 * The vLLM double's start that depends on the node's caches (issue 30):
 * --sim-read-weights reads the model's snapshot from the hub cache and fails
 * without it; --sim-compile-time is skipped once VLLM_CACHE_ROOT holds the
 * double's marker for the model.
 */

const COMMIT = 'c0ffee0000000000000000000000000000000001';
/** What vLLM's tokenizer reads from a local snapshot, offline: 4 bytes. */
const TOKENIZER = { 'tokenizer_config.json': Buffer.from('{}'), 'tokenizer.json': Buffer.from('{}') };
const roots: string[] = [];
afterEach(killFakeEngines);
afterAll(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

function tempRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-fake-weights-'));
  roots.push(root);
  return root;
}

/** A hub cache holding org/model at main, laid out as huggingface_hub writes it: blobs, snapshot links, refs/main. */
function hubCache(root: string, files: Record<string, Buffer>, repoId = 'org/model'): string {
  const hub = join(root, 'hub');
  const repo = join(hub, `models--${repoId.replace('/', '--')}`);
  mkdirSync(join(repo, 'blobs'), { recursive: true });
  mkdirSync(join(repo, 'refs'), { recursive: true });
  writeFileSync(join(repo, 'refs', 'main'), COMMIT);
  for (const [i, [path, content]] of Object.entries(files).entries()) {
    writeFileSync(join(repo, 'blobs', `blob${i}`), content);
    const link = join(repo, 'snapshots', COMMIT, ...path.split('/'));
    mkdirSync(join(link, '..'), { recursive: true });
    const up = '../'.repeat(path.split('/').length + 1);
    symlinkSync(`${up}blobs/blob${i}`, link);
  }
  return hub;
}

describe('the vLLM double reading its weights (--sim-read-weights)', () => {
  it('reads every byte of every file of the snapshot refs/main points at, subfolders included', async () => {
    const hub = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(9_000_001, 1), 'config.json': Buffer.from('{}'), 'sub/tokenizer.json': Buffer.alloc(5, 2) });
    const read = await readWeights('org/model', 'main', { HF_HUB_CACHE: hub });
    expect(read).toEqual({ snapshotDir: join(hub, 'models--org--model', 'snapshots', COMMIT), commit: COMMIT, files: 3, bytes: 9_000_001 + 2 + 5, digest: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });

  it('reads only what the loader reads: the indexed safetensors, never original/ nor a .bin twin (issue 51)', async () => {
    const index = Buffer.from(JSON.stringify({ weight_map: { a: 'model-1.safetensors' } }));
    const files = { 'model-1.safetensors': Buffer.alloc(100, 1), 'model.safetensors': Buffer.alloc(1000, 1), 'model.safetensors.index.json': index, 'pytorch_model.bin': Buffer.alloc(7000, 3), 'original/consolidated.00.pth': Buffer.alloc(9000, 4), 'config.json': Buffer.from('{}') };
    const read = await readWeights('org/model', 'main', { HF_HUB_CACHE: hubCache(tempRoot(), files) });
    expect(read).toMatchObject({ files: 3, bytes: 100 + index.length + 2 });
    // The same layout with other bytes: another digest, so another answer from the double.
    const other = await readWeights('org/model', 'main', { HF_HUB_CACHE: hubCache(tempRoot(), { ...files, 'model-1.safetensors': Buffer.alloc(100, 9) }) });
    expect(other.bytes).toBe(read.bytes);
    expect(other.digest).not.toBe(read.digest);
    // A .bin twin nobody reads changes nothing.
    const twin = await readWeights('org/model', 'main', { HF_HUB_CACHE: hubCache(tempRoot(), { ...files, 'pytorch_model.bin': Buffer.alloc(7000, 8) }) });
    expect(twin.digest).toBe(read.digest);
  });

  it('finds the cache under HF_HOME/hub when HF_HUB_CACHE is not set, and a commit given as the revision without refs', async () => {
    const root = tempRoot();
    hubCache(root, { 'model.safetensors': Buffer.alloc(10) });
    expect((await readWeights('org/model', COMMIT, { HF_HOME: root })).bytes).toBe(10);
  });

  it('says offline that the snapshot is not on the local disk, and online without an HF_ENDPOINT that it has nowhere to download from', async () => {
    const hub = join(tempRoot(), 'hub');
    const offline = readWeights('org/model', 'main', { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' });
    await expect(offline).rejects.toThrow(MissingWeightsError);
    await expect(offline).rejects.toThrow(/^LocalEntryNotFoundError: cannot find an appropriate cached snapshot folder for org\/model at revision main .*outgoing traffic has been disabled/);
    await expect(readWeights('org/model', 'main', { HF_HUB_CACHE: hub })).rejects.toThrow(/no HF_ENDPOINT for the double to download it from .*llmgw models pull org\/model/);
  });

  it('fails on a snapshot link whose blob is gone', async () => {
    const hub = hubCache(tempRoot(), { 'a.safetensors': Buffer.alloc(3), 'b.safetensors': Buffer.alloc(3), ...TOKENIZER });
    unlinkSync(join(hub, 'models--org--model', 'blobs', 'blob1'));
    await expect(readWeights('org/model', 'main', { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' })).rejects.toThrow(/file b\.safetensors of the cached snapshot .* has no blob/);
  });
});

describe('the vLLM double offline needs its tokenizer files too (engine-fidelity review 2, N4)', () => {
  it('fails offline on a snapshot of weights alone, as a pull with --include *.safetensors leaves it, naming the tokenizer files', async () => {
    const hub = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10), 'config.json': Buffer.from('{}') });
    await expect(readWeights('org/model', 'main', { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' })).rejects.toThrow(/^OSError: Can't load tokenizer for .*a vocabulary: tokenizer\.json, tokenizer\.model/);
  });

  it('takes a snapshot without tokenizer_config.json offline, as transformers does (get_tokenizer_config returns {}), and refuses one with tokenizer_config.json but no vocabulary', async () => {
    const without = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10), 'config.json': Buffer.from('{}'), 'tokenizer.json': Buffer.from('{}') });
    expect((await readWeights('org/model', 'main', { HF_HUB_CACHE: without, HF_HUB_OFFLINE: '1' })).files).toBe(3);
    const bpe = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10), 'vocab.json': Buffer.from('{}'), 'merges.txt': Buffer.from('') });
    expect((await readWeights('org/model', 'main', { HF_HUB_CACHE: bpe, HF_HUB_OFFLINE: '1' })).files).toBe(3);
    const configOnly = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10), 'tokenizer_config.json': Buffer.from('{}'), 'vocab.json': Buffer.from('{}') });
    await expect(readWeights('org/model', 'main', { HF_HUB_CACHE: configOnly, HF_HUB_OFFLINE: '1' })).rejects.toThrow(/^OSError: Can't load tokenizer/);
  });

  it('takes tokenizer_config.json with either tokenizer.json or tokenizer.model offline', async () => {
    const hub = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10), 'tokenizer_config.json': Buffer.from('{}'), 'tokenizer.model': Buffer.alloc(4) });
    expect((await readWeights('org/model', 'main', { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' })).files).toBe(3);
  });

  it('reads the tokenizer from the --tokenizer repo offline, which must be cached itself', async () => {
    const root = tempRoot();
    const hub = hubCache(root, { 'model.safetensors': Buffer.alloc(10) });
    const env = { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' };
    const tokenizer = { repo: 'org/tok', revision: 'main' };
    await expect(readWeights('org/model', 'main', env, undefined, { tokenizer })).rejects.toThrow(/^LocalEntryNotFoundError: .*for org\/tok at revision main/);
    hubCache(root, TOKENIZER, 'org/tok');
    expect((await readWeights('org/model', 'main', env, undefined, { tokenizer })).files).toBe(1);
  });

  it('online, reads the partial snapshot it finds and counts the rest as fetched from the hub', async () => {
    const hub = hubCache(tempRoot(), { 'model.safetensors': Buffer.alloc(10) });
    expect(await readWeights('org/model', 'main', { HF_HUB_CACHE: hub }, undefined, { tokenizer: { repo: 'org/tok', revision: 'main' } })).toMatchObject({ files: 1, bytes: 10 });
  });
});

describe('bin/fake-vllm with a cache-dependent start', () => {
  it('exits 1 while loading, naming the missing snapshot, when its weights are not in the hub cache offline', async () => {
    const root = tempRoot();
    const port = await freePort();
    const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), '--sim-read-weights'], { HF_HUB_CACHE: join(root, 'hub'), HF_HUB_OFFLINE: '1' });
    expect(await e.exited).toEqual({ code: 1, signal: null });
    expect(e.output()).toMatch(/ERROR .*LocalEntryNotFoundError: cannot find an appropriate cached snapshot folder for org\/model/);
    expect(e.output()).not.toMatch(/Application startup complete/);
  });

  it('compiles once, writes its marker under VLLM_CACHE_ROOT, and a second start with the marker skips a compile it could not finish', async () => {
    const root = tempRoot();
    const hub = hubCache(root, { 'model.safetensors': Buffer.alloc(1000, 7), ...TOKENIZER });
    const env = { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1', VLLM_CACHE_ROOT: join(root, 'vllm') };
    // Offline, vLLM hashes the snapshot's folder as the model (V:vllm/engine/arg_utils.py:809-822).
    const snapshot = join(hub, 'models--org--model', 'snapshots', COMMIT);
    const marker = compileMarkerPath(env, { model: snapshot, revision: COMMIT, tp: 1, pp: 1, version: '0.27.1', sleepMode: false });
    const start = async (compile: string) => {
      const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(await freePort()), '--sim-read-weights', '--sim-compile-time', compile], env);
      await outputMatches(e, /Application startup complete/, 30_000);
      return e;
    };
    const first = await start('200ms');
    expect(first.output()).toMatch(/Loading weights took [\d.]+ seconds: 3 files, 1004 bytes/);
    expect(first.output()).toMatch(/Compiling a graph/);
    expect(first.output()).toContain(`Using cache directory: ${join(marker, '..')} for vLLM's torch.compile`);
    expect(existsSync(marker)).toBe(true);
    await killFakeEngines();
    // An hour of compile: READY within the wait above only if the marker is used.
    const second = await start('1h');
    expect(second.output()).toMatch(/Directly load the compiled graph\(s\) for dynamic shape from the cache/);
    expect(second.output()).not.toMatch(/Compiling a graph/);
  });

  it('compiles again on the first offline start after an online one, and for the same model with --enable-sleep-mode (review §3 N14)', async () => {
    const root = tempRoot();
    const hub = hubCache(root, { 'model.safetensors': Buffer.alloc(100, 7) });
    const online = { HF_HUB_CACHE: hub, VLLM_CACHE_ROOT: join(root, 'vllm') };
    const start = async (env: Record<string, string>, extra: string[] = []) => {
      const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(await freePort()), '--sim-compile-time', '100ms', ...extra], env);
      await outputMatches(e, /Application startup complete/, 30_000);
      await killFakeEngines();
      return /Compiling a graph/.test(e.output());
    };
    expect(await start(online)).toBe(true);
    expect(await start(online)).toBe(false);
    // ModelConfig.model is now the snapshot's folder: another hash, one more compile, then hits.
    expect(await start({ ...online, HF_HUB_OFFLINE: '1' })).toBe(true);
    expect(await start({ ...online, HF_HUB_OFFLINE: '1' })).toBe(false);
    // enable_sleep_mode is hashed too (V:vllm/config/model.py:338).
    expect(await start(online, ['--enable-sleep-mode'])).toBe(true);
  });
});

describe('the doubles\' compile caches, keyed and written as the engines do (issue 51)', () => {
  it('vLLM writes its metadata at compile start with caching off, never the cache file, and compiles every time', async () => {
    const root = tempRoot();
    const env = { VLLM_CACHE_ROOT: join(root, 'vllm'), VLLM_DISABLE_COMPILE_CACHE: '1' };
    const marker = compileMarkerPath(env, { model: 'org/model', revision: 'main', tp: 1, pp: 1, version: '0.27.1', sleepMode: false, maxModelLen: '' });
    const start = async (extra: string[] = [], e2: Record<string, string> = env) => {
      const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(await freePort()), '--sim-compile-time', '100ms', ...extra], e2);
      await outputMatches(e, /Application startup complete/, 30_000);
      await killFakeEngines();
      return e.output();
    };
    const off = await start();
    expect(off).toContain("vLLM's torch.compile cache is disabled.");
    expect(off).not.toContain('Using cache directory');
    expect(existsSync(join(marker, '..', 'cache_key_factors.json'))).toBe(true);
    expect(existsSync(marker)).toBe(false);
    expect(await start()).toMatch(/Compiling a graph/);
    // Caching on: one compile, then hits; another --max-model-len is another folder, compiled anew.
    const on = { VLLM_CACHE_ROOT: env.VLLM_CACHE_ROOT };
    expect(await start([], on)).toMatch(/Compiling a graph/);
    expect(await start([], on)).toMatch(/Directly load the compiled graph/);
    expect(await start(['--max-model-len', '2048'], on)).toMatch(/Compiling a graph/);
  });

  it('SGLang keeps its cache under SGLANG_CACHE_DIR/torch_compile_cache and leaves Triton kernels that do not count', async () => {
    const root = tempRoot();
    const env = { SGLANG_CACHE_DIR: join(root, 'sglang'), TRITON_CACHE_DIR: join(root, 'triton') };
    const start = async () => {
      const e = startFakeEngine(FAKE_SGLANG, ['--model-path', 'org/model', '--port', String(await freePort()), '--sim-compile-time', '100ms', '--skip-server-warmup'], env);
      await outputMatches(e, /Uvicorn running/, 30_000);
      await killFakeEngines();
      return e.output();
    };
    expect(await start()).toMatch(/Compiling a graph for dynamic shape takes/);
    expect(existsSync(join(root, 'triton', 'sim-kernel', 'kernel.json'))).toBe(true);
    expect(await start()).not.toMatch(/Compiling a graph/);
  });
});

describe('bin/fake-sglang with --sim-read-weights (issue 41)', () => {
  it('reads its snapshot from the hub cache before it serves, and dies of a scheduler exception without one offline', async () => {
    const root = tempRoot();
    const hub = hubCache(root, { 'model.safetensors': Buffer.alloc(3_000_000, 7), ...TOKENIZER });
    const port = await freePort();
    const ok = startFakeEngine(FAKE_SGLANG, ['serve', '--model-path', 'org/model', '--port', String(port), '--skip-server-warmup', '--sim-read-weights'], { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' });
    await outputMatches(ok, /Uvicorn running/);
    expect(ok.output()).toMatch(/Load weight end\. read 3 files, 3000004 bytes from .*models--org--model\/snapshots\//);
    const missing = startFakeEngine(FAKE_SGLANG, ['serve', '--model-path', 'org/other', '--port', String(await freePort()), '--sim-read-weights'], { HF_HUB_CACHE: hub, HF_HUB_OFFLINE: '1' });
    expect((await missing.exited).signal).toBe('SIGKILL');
    expect(missing.output()).toMatch(/Scheduler hit an exception: OSError: LocalEntryNotFoundError: cannot find an appropriate cached snapshot folder for org\/other/);
    expect(missing.output()).not.toMatch(/Uvicorn running/);
  });
});
