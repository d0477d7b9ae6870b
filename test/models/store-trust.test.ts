import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { agentConfigYaml } from '../helpers/agent-config-yaml.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { runCli } from '../helpers/run-cli.js';
import { assertTrustedStore } from '../../src/models/store-trust.js';
import { prepareEngineCache } from '../../src/models/engine-cache-env.js';
import { StoreLayout } from '../../src/models/store-layout.js';

/*
 * Security review 3, S1: the engine account reached root through the model
 * store it owned (the README's set-up until then). The store is now root's,
 * read-only to engines, and the agent refuses one the engine account could
 * steer before it does anything there. The engine account here is a real
 * unprivileged uid (nobody, 65534): what it plants, it plants as itself.
 */

const NOBODY = 65534;
const asRoot = process.geteuid?.() === 0;

/** Runs `argv` as the engine account (nobody). */
function asEngine(argv: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(argv[0] as string, argv.slice(1), { uid: NOBODY, gid: NOBODY, encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-store-trust-'));
  // mkdtemp's 0700 would keep nobody out of everything, hiding what the store's own modes do.
  chmodSync(root, 0o755);
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe.skipIf(!asRoot)('a model store the engine account cannot steer (run as root, the engine account as uid 65534)', () => {
  it('refuses a store the engine account owns (the old README set-up) at the agent\'s start, exit 78, before anything is touched there', async () => {
    const cache = join(root, 'models');
    mkdirSync(join(cache, 'llmgw', 'pins'), { recursive: true });
    chownSync(cache, NOBODY, NOBODY);
    // What the review planted (its part C): a pin folder that is a link to a root-only directory of shard-id-like files.
    const rootOnly = join(root, 'rootonly');
    mkdirSync(rootOnly, { mode: 0o700 });
    writeFileSync(join(rootOnly, 'shadow'), 'secret\n', { mode: 0o600 });
    writeFileSync(join(rootOnly, 'passwd'), 'secret\n', { mode: 0o600 });
    chmodSync(join(cache, 'llmgw', 'pins'), 0o777);
    expect(asEngine(['ln', '-s', rootOnly, join(cache, 'llmgw', 'pins', 'models--evil--gone')]).status).toBe(0);

    const dirs = tempAgentDirs('llmgw-store-trust-agent-');
    const config = join(dirs.root, 'agent.yaml');
    mkdirSync(dirs.root, { recursive: true });
    writeFileSync(config, agentConfigYaml({ server: 'http://127.0.0.1:1', dirs, extraYaml: `models:\n  cache_dir: ${cache}\n  budget: 1GiB\n` }));
    const r = await runCli(['agent', 'run', '--config', config]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toContain(`models.cache_dir: directory ${cache} is owned by uid ${NOBODY}, not root`);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    // Nothing deleted through the link, nothing written.
    expect(readFileSync(join(rootOnly, 'shadow'), 'utf8')).toBe('secret\n');
    expect(existsSync(join(rootOnly, 'passwd'))).toBe(true);
    // `models list` refuses to read there too.
    const listed = await runCli(['models', 'list', '--config', config]);
    expect(listed.exitCode).toBe(78);
    expect(listed.stderr).toContain('is owned by uid 65534');
  });

  it('refuses an entry deep in a root-owned store that the engine account owns or could write, naming it and the fix', () => {
    const cache = join(root, 'models');
    const blobs = join(cache, 'hub', 'models--acme--m', 'blobs');
    mkdirSync(blobs, { recursive: true });
    writeFileSync(join(blobs, 'abc'), 'weights');
    expect(() => assertTrustedStore(cache)).not.toThrow();
    // A blob the engine account could rewrite (the review's part D): the store would serve changed weights as complete.
    chownSync(join(blobs, 'abc'), NOBODY, NOBODY);
    expect(() => assertTrustedStore(cache)).toThrow(`models.cache_dir: ${join(blobs, 'abc')} is owned by uid ${NOBODY}`);
    chownSync(join(blobs, 'abc'), 0, 0);
    chmodSync(blobs, 0o777);
    expect(() => assertTrustedStore(cache)).toThrow(/blobs is writable by group or others \(mode 0777\).*sudo chown -R root:root .*\/hub .*\/llmgw && sudo chmod -R go-w/);
    chmodSync(blobs, 0o755);
    // The shared compile cache of an older llmgw, the engine account's: removed, since any engine could have written code there (S9).
    mkdirSync(join(cache, 'compile', 'vllm'), { recursive: true });
    chownSync(join(cache, 'compile', 'vllm'), NOBODY, NOBODY);
    expect(() => assertTrustedStore(cache)).toThrow(`${join(cache, 'compile', 'vllm')} is owned by uid ${NOBODY}`);
  });

  it('gives the engine account its own cache folder per engine and model, which it may fill, and no other', async () => {
    const cache = join(root, 'models');
    mkdirSync(cache, { mode: 0o755 });
    const layout = new StoreLayout(cache);
    const mine = layout.engineCacheDir(NOBODY, 'vllm', 'acme/m');
    await prepareEngineCache(mine, { uid: NOBODY, gid: NOBODY });
    expect(lstatSync(mine).uid).toBe(NOBODY);
    expect(lstatSync(join(mine, '..')).uid).toBe(0);
    // The account writes its compiled graphs there, links and all: the agent does not look inside.
    expect(asEngine(['mkdir', '-p', join(mine, 'vllm', 'torch_compile_cache')]).status).toBe(0);
    expect(asEngine(['ln', '-s', '/etc/shadow', join(mine, 'vllm', 'x')]).status).toBe(0);
    expect(() => assertTrustedStore(cache)).not.toThrow();
    // Nowhere else: not another model's folder, not the store's.
    const other = layout.engineCacheDir(NOBODY, 'vllm', 'acme/other');
    expect(asEngine(['mkdir', '-p', other]).status).not.toBe(0);
    expect(asEngine(['mkdir', '-p', join(cache, 'hub', 'models--evil--x')]).status).not.toBe(0);
    // A leaf of another account's path that this one owns is refused: the folder names whose code it is.
    const forged = layout.engineCacheDir(1234, 'vllm', 'acme/m');
    mkdirSync(forged, { recursive: true });
    chownSync(forged, NOBODY, NOBODY);
    expect(() => assertTrustedStore(cache)).toThrow(`is owned by uid ${NOBODY}, not 1234 whose compile cache it is`);
  });
});
