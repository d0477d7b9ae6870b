import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, afterEach, describe, expect, it } from 'vitest';
import { pinModel, unpinModel } from '../../src/models/model-pins.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { fakeAdapterRepo } from '../helpers/fake-adapter-repo.js';
import { runCli } from '../helpers/run-cli.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

const hub = new FakeHub();
hub.repos.set('acme/lora', fakeAdapterRepo('acme/lora', { base: 'acme/base', rank: 16 }));
hub.repos.set('acme/lora-big', fakeAdapterRepo('acme/lora-big', { weights: bytes(3 * 1024 * 1024, 4) }));
hub.repos.set('acme/model', fakeRepo('acme/model', [{ path: 'config.json', content: Buffer.from('{}\n'), lfs: false }, { path: 'model.safetensors', content: bytes(60_000, 9), lfs: true }]));

let dir: string;
let cacheDir: string;

function config(budget = '64MiB'): string {
  const path = join(dir, 'agent.yaml');
  writeFileSync(path, `models:\n  cache_dir: ${cacheDir}\n  budget: ${budget}\n  hub:\n    endpoint: ${hub.url}\n`);
  return path;
}

beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-adapter-cli-'));
  cacheDir = join(dir, 'cache');
  hub.requests.length = 0;
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

// Each case spawns the CLI two to five times; at load 16+ on 2 cores one spawn took 4 s: the bound is a safety net.
describe('llmgw models with LoRA adapters', { timeout: 120_000 }, () => {
  it('pulls an adapter by repo@revision naming its base, rank and digest, and lists it with them (human and --json) beside a model', async () => {
    const c = config();
    const pulled = await runCli(['models', 'pull', 'acme/lora@main', '--config', c]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
    expect(pulled.stdout).toMatch(/^pulled adapter acme\/lora@main \([0-9a-f]{12}\): 2 files, .* fetched; a LoRA adapter of acme\/base, rank 16, sha256:[0-9a-f]{64}\n.*models--acme--lora\/snapshots\/[0-9a-f]{40}$/);
    // The look-alike: a model's summary says nothing of adapters.
    const model = await runCli(['models', 'pull', 'acme/model', '--config', c]);
    expect(model.stdout).toMatch(/^pulled acme\/model@main \([0-9a-f]{12}\): 2 files, [^;]*\n/);

    const json = await runCli(['models', 'list', '--config', c, '--json']);
    expect(json.exitCode, json.stderr).toBe(0);
    const models = JSON.parse(json.stdout).models as Record<string, unknown>[];
    expect(models).toMatchObject([
      { repo: 'acme/lora', kind: 'adapter', baseModel: 'acme/base', rank: 16, complete: true },
      { repo: 'acme/model', kind: 'model', complete: true },
    ]);
    expect(models[1]).not.toHaveProperty('baseModel');
    const human = await runCli(['models', 'list', '--config', c]);
    expect(human.stdout).toMatch(/^MODEL .* PINNED BY +KIND +BASE +RANK *$/m);
    expect(human.stdout).toMatch(/^acme\/lora +main=[0-9a-f]{12} +complete .* adapter +acme\/base +16 *$/m);
    expect(human.stdout).toMatch(/^acme\/model +main=[0-9a-f]{12} +complete .* model +- +- *$/m);
  });

  it('refuses to remove a pinned adapter as it does a pinned model; unpinned it goes', async () => {
    const c = config();
    expect((await runCli(['models', 'pull', 'acme/lora', '--config', c])).exitCode).toBe(0);
    const layout = new StoreLayout(cacheDir);
    await pinModel(layout, 'acme/lora', 'shard-7');
    const refused = await runCli(['models', 'rm', 'acme/lora', '--config', c]);
    expect([refused.exitCode, refused.stderr.trim()]).toEqual([1, 'error: acme/lora is not removed: pinned by shard-7; try again once it is not in use']);
    expect(existsSync(layout.repoDir('acme/lora'))).toBe(true);
    await unpinModel(layout, 'acme/lora', 'shard-7');
    const removed = await runCli(['models', 'rm', 'acme/lora', '--config', c]);
    expect([removed.exitCode, removed.stdout.trim()]).toEqual([0, 'removed acme/lora']);
    expect(existsSync(layout.repoDir('acme/lora'))).toBe(false);
  });

  it('refuses an adapter larger than models.budget in one line with nothing fetched; under a budget it fits, it pulls', async () => {
    const refused = await runCli(['models', 'pull', 'acme/lora-big', '--config', config('2MiB')]);
    expect([refused.exitCode, refused.stderr.trim()]).toEqual([
      1,
      'error: acme/lora-big@main is 3 MiB (a LoRA adapter), more than all of models.budget (2 MiB): it can never fit, nothing was fetched or evicted; raise models.budget',
    ]);
    expect(readdirSync(join(cacheDir, 'hub'))).toEqual([]);
    expect(hub.requests.filter((r) => r.url.includes('/resolve/'))).toEqual([]);
    const pulled = await runCli(['models', 'pull', 'acme/lora-big', '--config', config('4MiB')]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
  });

  it('refuses a revision given twice differently; the same twice is one', async () => {
    const c = config();
    const twice = await runCli(['models', 'pull', 'acme/lora@v1', '--revision', 'main', '--config', c]);
    expect([twice.exitCode, twice.stderr.trim()]).toEqual([2, 'error: acme/lora@v1 names revision v1 and --revision names main; give one']);
    const same = await runCli(['models', 'pull', 'acme/lora@main', '--revision', 'main', '--config', c]);
    expect(same.exitCode, same.stderr).toBe(0);
  });
});
