import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkModelPath } from '../../../src/agent/engines/check-model-path.js';

const base = realpathSync(mkdtempSync(join(tmpdir(), 'llmgw-model-roots-')));
afterAll(() => rmSync(base, { recursive: true, force: true }));

const models = join(base, 'models');
mkdirSync(join(models, 'llama', 'weights'), { recursive: true });
mkdirSync(join(base, 'secret'), { recursive: true });
// A symlink under the root that leads out of it, and a root that is itself a symlink.
symlinkSync(join(base, 'secret'), join(models, 'out'));
symlinkSync(models, join(base, 'models-link'));

const check = (value: string, roots: string[] = [models]) => checkModelPath(value, roots, 'vllm');

describe('checkModelPath: a hub repo id, or a local path under a model root (security review 2, N1)', () => {
  it('passes hub repo ids, Unicode ones too, that name nothing on this node', async () => {
    for (const id of ['meta-llama/Llama-3.1-8B-Instruct', 'gpt2', 'Qwen/通义千问-7B', 'org/name.v2']) expect(await check(id, [])).toBeUndefined();
  });

  it('refuses absolute, ./, ../ and ~ paths, and what is no repo id, when no root is configured', async () => {
    for (const p of ['/etc', './m', '../m', '~/m', 'a/b/c', 's3://bucket/m', 'a..b']) {
      expect(await check(p, [])).toMatch(/^is a local path.* and engines\.vllm\.model_roots is empty; use a hub repo id, or list the directory that holds it in engines\.vllm\.model_roots$/);
    }
  });

  it('takes a name that reads like a repo id but exists relative to the working directory as the local path it is', async () => {
    // vLLM takes a model that exists on disk before the hub: "usr/share" from "/" is /usr/share.
    expect(await check('usr/share', [])).toMatch(/^is a local path/);
    expect(await check('etc', [])).toMatch(/^is a local path/);
  });

  it('passes a path under a root, the root itself, and a root that is a symlink', async () => {
    expect(await check(join(models, 'llama'))).toBeUndefined();
    expect(await check(join(models, 'llama', 'weights'))).toBeUndefined();
    expect(await check(models)).toBeUndefined();
    expect(await check(join(base, 'models-link', 'llama'), [join(base, 'models-link')])).toBeUndefined();
  });

  it('refuses what .. or a symlink under the root leads out of it to, naming where it resolves', async () => {
    expect(await check(join(models, 'llama', '..', '..', 'secret'))).toBe(
      `is a local path, not a hub repo id (org/name), that resolves to ${JSON.stringify(join(base, 'secret'))}, outside engines.vllm.model_roots (${models})`,
    );
    expect(await check(join(models, 'out'))).toMatch(/that resolves to ".*\/secret", outside engines\.vllm\.model_roots/);
    // A sibling whose name begins with the root's is not under it.
    mkdirSync(`${models}-2`, { recursive: true });
    expect(await check(`${models}-2`)).toMatch(/outside engines\.vllm\.model_roots/);
  });

  it('refuses a path that does not exist, saying so', async () => {
    expect(await check(join(models, 'nope'))).toMatch(/^is a local path, not a hub repo id \(org\/name\), that cannot be resolved on this node \(.*\); a local model must be under engines\.vllm\.model_roots/);
  });
});
