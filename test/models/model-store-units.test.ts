import { describe, expect, it } from 'vitest';
import { chooseEvictions } from '../../src/models/choose-evictions.js';
import { engineCacheEnv } from '../../src/models/engine-cache-env.js';
import { includeMatcher } from '../../src/models/match-include.js';
import { checkRepoId, checkRevision, repoFolderName, repoFromFolderName } from '../../src/models/repo-id.js';
import type { StoredModel } from '../../src/models/scan-store.js';
import { renderModelsList } from '../../src/models/render-models-list.js';
import { isSafeRepoPath } from '../../src/models/hub-client.js';

function model(repo: string, bytes: number, lastUsedMs: number, more: Partial<StoredModel> = {}): StoredModel {
  return { repo, refs: {}, completeCommits: [], complete: true, subset: false, bytes, partialBytes: 0, lastUsedMs, pins: [], pulling: false, ...more };
}

describe('chooseEvictions', () => {
  const models = [model('o/old', 40, 1), model('o/pinned', 40, 0, { pins: ['s0'] }), model('o/pulling', 40, 0, { pulling: true }), model('o/new', 40, 5), model('o/me', 40, 0)];

  it('evicts least recently used first, skipping pinned, pulling and the model being pulled', () => {
    expect(chooseEvictions(models, 30, 200, 'o/me').evict.map((m) => m.repo)).toEqual(['o/old']);
    expect(chooseEvictions(models, 70, 200, 'o/me').evict.map((m) => m.repo)).toEqual(['o/old', 'o/new']);
  });

  it('says when even every candidate gone is not enough', () => {
    const plan = chooseEvictions(models, 200, 200, 'o/me');
    expect(plan.fits).toBe(false);
    expect(plan.bytesAfter).toBe(320);
  });

  it('evicts nothing when the bytes fit', () => {
    expect(chooseEvictions(models, 0, 200, 'o/me')).toEqual({ evict: [], fits: true, bytesAfter: 200 });
  });
});

describe('includeMatcher', () => {
  it('matches as fnmatch does in huggingface_hub: * crosses folders, a trailing / means the folder', () => {
    const m = includeMatcher(['*.safetensors', 'tokenizer/', 'config.jso?']);
    expect(['a/b.safetensors', 'model.safetensors', 'tokenizer/x.json', 'config.json'].map(m)).toEqual([true, true, true, true]);
    expect(['model.bin', 'tokenizerx.json', 'config.json5'].map(m)).toEqual([false, false, false]);
    expect(includeMatcher([])('anything')).toBe(true);
  });

  it('takes classes, complements, ranges, a literal [ and runs of stars as fnmatch does', () => {
    const m = (p: string, s: string) => includeMatcher([p])(s);
    expect([m('model-0000[1-3]-of-*.bin', 'model-00002-of-00004.bin'), m('model-0000[1-3]-of-*.bin', 'model-00004-of-00004.bin')]).toEqual([true, false]);
    expect([m('[!c]*.json', 'config.json'), m('[!c]*.json', 'tokenizer.json')]).toEqual([false, true]);
    expect([m('[]x]y', ']y'), m('[a', '[a'), m('a**b', 'a/x/b'), m('*a*b*', 'xxbxxa'), m('*a*b*', 'xaxbx')]).toEqual([true, true, true, false, true]);
    expect([m('*.safetensors', '.safetensors'), m('a*a', 'a'), m('a*a', 'aa'), m('?*', ''), m('*', '')]).toEqual([true, false, true, false, true]);
  });

  it('matches a pattern of many stars against a long name at once, where a backtracking regexp took minutes (security review 3, S3)', () => {
    // 12 stars took the regexp 140 s; this many would not end before the test's limit.
    const m = includeMatcher([`${'*'.repeat(24)}Q`, `${'*a'.repeat(100)}Q`]);
    expect(m('model-00001-of-00004.safetensors')).toBe(false);
    expect(m(`${'a'.repeat(4000)}`)).toBe(false);
    expect(m(`${'a'.repeat(200)}Q`)).toBe(true);
  });
});

describe('repo ids and revisions', () => {
  it('accepts hub ids and maps them to the hub cache folder and back', () => {
    expect(checkRepoId('Qwen/Qwen2.5-0.5B-Instruct')).toBe('Qwen/Qwen2.5-0.5B-Instruct');
    expect(repoFolderName('Qwen/Qwen2.5-0.5B-Instruct')).toBe('models--Qwen--Qwen2.5-0.5B-Instruct');
    expect(repoFromFolderName('models--Qwen--Qwen2.5-0.5B-Instruct')).toBe('Qwen/Qwen2.5-0.5B-Instruct');
    expect(repoFromFolderName('.locks')).toBeUndefined();
  });

  it.each(['../etc', 'a/../b', 'a/b/c', 'gpt2', 'a--b/c', 'a/b..c', '/a/b', 'a/.b', 'a b/c', `a/${'x'.repeat(97)}`])('refuses %j as a repo id', (id) => {
    expect(() => checkRepoId(id)).toThrow(expect.objectContaining({ exitCode: 2 }));
  });

  it.each(['..', 'a/../b', '/main', 'main/', 'a//b', '.hidden', ''])('refuses %j as a revision', (rev) => {
    expect(() => checkRevision(rev)).toThrow(expect.objectContaining({ exitCode: 2 }));
  });

  it('accepts only file names of the hub that stay inside a snapshot', () => {
    expect(['a.json', 'sub/dir/x.bin'].map(isSafeRepoPath)).toEqual([true, true]);
    expect(['../x', 'a/../../x', '/etc/passwd', 'a//b', 'a\\b', '', './a'].map(isSafeRepoPath)).toEqual(Array(7).fill(false));
  });
});

describe('renderModelsList', () => {
  it('calls a model pulled with --include a subset, not complete: its shards start online', () => {
    const table = renderModelsList([model('o/whole', 1024, 0), model('o/some', 1024, 0, { subset: true }), model('o/half', 1024, 0, { complete: false })], 1 << 20);
    expect(table.split('\n').slice(1, 4).map((l) => l.split(/\s+/)[2])).toEqual(['complete', 'subset', 'partial']);
  });
});

describe('engineCacheEnv', () => {
  it('points the engine at its own caches, leaves HF_HOME (and so the token file) alone, and gives the store (read-only) only to an offline start', () => {
    const engineCacheDir = '/srv/models/engines/998/vllm/models--acme--m';
    expect(engineCacheEnv({ cacheDir: '/srv/models', modelComplete: false, engineCacheDir, hubEndpoint: 'https://hf.example' })).toEqual({
      VLLM_CACHE_ROOT: `${engineCacheDir}/vllm`,
      SGLANG_CACHE_DIR: `${engineCacheDir}/sglang`,
      TORCHINDUCTOR_CACHE_DIR: `${engineCacheDir}/torchinductor`,
      TRITON_CACHE_DIR: `${engineCacheDir}/triton`,
      HF_HUB_CACHE: `${engineCacheDir}/hub`,
      HF_ENDPOINT: 'https://hf.example',
    });
    expect(engineCacheEnv({ cacheDir: '/srv/models', modelComplete: true, engineCacheDir })).toMatchObject({ HF_HUB_CACHE: '/srv/models/hub', HF_HUB_OFFLINE: '1' });
  });

  it('gives nothing when the store is off', () => {
    expect(engineCacheEnv({ cacheDir: '', modelComplete: true, engineCacheDir: '/x' })).toEqual({});
  });
});
