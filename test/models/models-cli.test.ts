import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ResultPromise, execa } from 'execa';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { BIN, runCli } from '../helpers/run-cli.js';
import { dropFromPageCache } from '../helpers/drop-page-cache.js';
import { FakeHub, bytes, fakeRepo, sha256 } from './fake-hub.js';

const hub = new FakeHub();
const BIG = bytes(4 * 1024 * 1024, 7);
const MID = bytes(1024 * 1024, 8);
hub.repos.set('acme/big', fakeRepo('acme/big', [{ path: 'big.bin', content: BIG, lfs: true }, { path: 'config.json', content: Buffer.from('{}\n'), lfs: false }]));
hub.repos.set('acme/mid', fakeRepo('acme/mid', [{ path: 'mid.bin', content: MID, lfs: true }]));

let dir: string;
let cacheDir: string;
const children: ResultPromise[] = [];

function writeConfig(models: string, name = 'agent.yaml'): string {
  const path = join(dir, name);
  writeFileSync(path, `node_id: node-a\nserver: http://127.0.0.1:9\nmodels:\n${models}`);
  return path;
}

function goodConfig(): string {
  return writeConfig(`  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n`);
}

function startPull(config: string, repo: string): ResultPromise {
  const child = execa(process.execPath, [BIN, 'models', 'pull', repo, '--config', config], { reject: false, stdin: 'ignore', env: { NO_COLOR: '1' } });
  children.push(child);
  return child;
}

async function waitFor(cond: () => boolean, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function partialSize(repoFolder: string, etag: string): number {
  try {
    return statSync(join(cacheDir, 'hub', repoFolder, 'blobs', `${etag}.incomplete`)).size;
  } catch {
    return 0;
  }
}

beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-models-cli-'));
  cacheDir = join(dir, 'cache');
  hub.requests.length = 0;
  hub.trickle.clear();
});
afterEach(async () => {
  for (const c of children.splice(0)) {
    c.kill('SIGKILL');
    await c;
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('llmgw models pull', () => {
  it('needs no server or node_id: a store command never reaches the control plane (walkthrough 4, O12); agent run still does', async () => {
    const path = join(dir, 'store-only.yaml');
    writeFileSync(path, `models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n`);
    const pulled = await runCli(['models', 'pull', 'acme/mid', '--config', path]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
    const listed = await runCli(['models', 'list', '--config', path]);
    expect(listed.stdout).toMatch(/^acme\/mid +main=/m);
    // Look-alike: the agent needs both, and says so as before.
    writeFileSync(path, `node_id: node-a\nmodels:\n  cache_dir: ${cacheDir}\n`);
    const agent = await runCli(['agent', 'run', '--config', path]);
    expect([agent.exitCode, agent.stderr.trim()]).toEqual([78, `error: server is required (set it in ${path}, LLMGW_SERVER, --server)`]);
  });

  it('resumes a file after kill -9 with a Range request, verifies it and completes', async () => {
    const config = goodConfig();
    hub.trickle.set('big.bin', 32 * 1024);
    const first = startPull(config, 'acme/big');
    await waitFor(() => partialSize('models--acme--big', sha256(BIG)) >= 256 * 1024, 'part of big.bin on disk');
    first.kill('SIGKILL');
    const killed = await first;
    expect(killed.signal).toBe('SIGKILL');
    const left = partialSize('models--acme--big', sha256(BIG));
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(BIG.length);

    hub.trickle.clear();
    const second = await runCli(['models', 'pull', 'acme/big', '--config', config]);
    expect(second.stderr).toContain('resumed at');
    expect(second.exitCode).toBe(0);
    const ranges = hub.downloads('big.bin').map((r) => r.range);
    const resumedAt = Number(/^bytes=(\d+)-$/.exec(ranges.at(-1) ?? '')?.[1]);
    expect(resumedAt).toBeGreaterThanOrEqual(left);
    expect(second.stdout).toMatch(/^pulled acme\/big@main \([0-9a-f]{12}\): 2 files, 4 MiB, .* fetched, .* resumed$/m);
    const snapshot = second.stdout.trim().split('\n').at(-1) as string;
    expect(createHash('sha256').update(readFileSync(join(snapshot, 'big.bin'))).digest('hex')).toBe(sha256(BIG));
    expect(readdirSync(join(cacheDir, 'hub', 'models--acme--big', 'blobs')).filter((b) => b.endsWith('.incomplete'))).toEqual([]);

    const list = await runCli(['models', 'list', '--config', config, '--json']);
    expect(list.exitCode).toBe(0);
    expect(JSON.parse(list.stdout).models).toMatchObject([{ repo: 'acme/big', complete: true, partialBytes: 0, bytes: BIG.length + 3, pins: [] }]);
    // IN MEMORY (issue 41): what the page cache holds of it now. Dropped first (nothing else reads these files),
    // then warmed; read with margins, since a loaded machine may evict a page between two calls.
    const blobs = join(cacheDir, 'hub', 'models--acme--big', 'blobs');
    await dropFromPageCache(readdirSync(blobs).map((b) => join(blobs, b)));
    const resident = async () => JSON.parse((await runCli(['models', 'list', '--config', config, '--json'])).stdout).models[0].residentBytes as number;
    expect(await resident()).toBeLessThan((BIG.length + 3) / 10);
    const warmed = await runCli(['models', 'warm', 'acme/big', '--config', config]);
    expect(warmed.exitCode, warmed.stderr).toBe(0);
    expect(await resident()).toBeGreaterThan((BIG.length + 3) / 2);
    expect((await runCli(['models', 'list', '--config', config])).stdout).toMatch(/^acme\/big\s+main=[0-9a-f]{12}\s+complete\s+\S+ \S+\s+\S+ \S+ \(\d+%\)/m);
    // Seven CLI runs and a trickled download: 10-26 s alone at load 20, over the default 30 s once beside others.
  }, 90_000);

  it('downloads a model once when two processes pull it at the same time', async () => {
    const config = goodConfig();
    // The first pull's body waits at the hub until the second pull is seen waiting for it: the overlap
    // is made, not hoped for (a pull that finished before the other's start once left nothing to wait for).
    let open = () => {};
    hub.gates.set('mid.bin', new Promise<void>((r) => { open = r; }));
    onTestFinished(() => {
      open();
      hub.gates.delete('mid.bin');
    });
    const first = startPull(config, 'acme/mid');
    let firstErr = '';
    first.stderr?.on('data', (d: Buffer) => { firstErr += d.toString(); });
    await waitFor(() => firstErr.includes('fetching mid.bin'), 'the first pull fetching mid.bin');
    const second = startPull(config, 'acme/mid');
    let secondErr = '';
    second.stderr?.on('data', (d: Buffer) => { secondErr += d.toString(); });
    await waitFor(() => /waiting for the pull of process \d+ of the same model/.test(secondErr), 'the second pull waiting for the first');
    open();
    const [a, b] = await Promise.all([first, second]);
    expect([a.exitCode, b.exitCode]).toEqual([0, 0]);
    expect(hub.downloads('mid.bin')).toHaveLength(1);
    expect(`${a.stderr}${b.stderr}`).toMatch(/waiting for the pull of process \d+ of the same model/);
  });

  it('lists and removes a model, and refuses to remove a pinned one', async () => {
    const config = goodConfig();
    expect((await runCli(['models', 'pull', 'acme/mid', '--config', config])).exitCode).toBe(0);
    const list = await runCli(['models', 'list', '--config', config]);
    expect(list.stdout).toMatch(/^acme\/mid\s+main=[0-9a-f]{12}\s+complete\s+1 MiB/m);
    const pins = join(cacheDir, 'llmgw', 'pins', 'models--acme--mid');
    await import('node:fs/promises').then((fs) => fs.mkdir(pins, { recursive: true }));
    writeFileSync(join(pins, 'shard-0'), '1\n');
    const refused = await runCli(['models', 'rm', 'acme/mid', '--config', config]);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toContain('acme/mid is not removed: pinned by shard-0');
    rmSync(join(pins, 'shard-0'));
    const removed = await runCli(['models', 'rm', 'acme/mid', '--config', config]);
    expect(removed.exitCode).toBe(0);
    expect(readdirSync(join(cacheDir, 'hub'))).toEqual([]);
    // Again: there is nothing to remove, and it says so rather than "removed" (walkthrough 3).
    const absent = await runCli(['models', 'rm', 'acme/mid', '--config', config]);
    expect(absent.exitCode).toBe(1);
    expect(absent.stderr.trim()).toBe('error: acme/mid is not in the model store; `llmgw models list` shows what is');
  });
});

describe('llmgw models: bad input is one line and the right exit code', () => {
  it.each([
    [['models', 'pull', '../etc'], 2, 'is not a hub model id'],
    [['models', 'pull', 'a--b/c'], 2, 'may not contain -- or ..'],
    [['models', 'pull', 'acme/big', '--revision', '../../x'], 2, 'is not a branch, tag or commit'],
    [['models', 'rm', 'acme/../x'], 2, 'is not a hub model id'],
  ])('%j exits %i', async (args, code, text) => {
    const r = await runCli([...args, '--config', goodConfig()]);
    expect(r.exitCode).toBe(code);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(text);
  });

  it.each([
    ['  cache_dir: CACHE\n  budget: lots\n', 'models.budget: string "lots" is not a size'],
    ['  cache_dir: relative/dir\n  budget: 1GiB\n', 'models.cache_dir "relative/dir" must be an absolute path'],
    ['  cache_dir: CACHE\n', 'models.budget is required with models.cache_dir'],
    ['  cache_dir: CACHE\n  budget: 1GiB\n  hub:\n    endpoint: ftp://hub\n', 'models.hub.endpoint "ftp://hub" is not an http:// or https:// address'],
    ['  cache_dir: CACHE\n  budget: 1GiB\n  max_concurrent: 0\n', 'models.max_concurrent must be at least 1'],
    ['  cache_dir: CACHE\n  budget: 1GiB\n  hub:\n    tokn_file: /x\n', 'unknown key models.hub.tokn_file'],
    ['  budget: 1GiB\n', 'models.cache_dir is not set'],
  ])('config %j exits 78', async (models, text) => {
    const r = await runCli(['models', 'list', '--config', writeConfig(models.replace('CACHE', cacheDir))]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(text);
  });

  it('a model the hub does not have exits 1, naming it', async () => {
    const r = await runCli(['models', 'pull', 'acme/nope', '--config', goodConfig()]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain('the hub has no model acme/nope at revision main (HTTP 404)');
  });
});

describe('llmgw models warm', () => {
  it('reads a complete model into the page cache within its budget, and says how much is there before and after', async () => {
    const config = goodConfig();
    expect((await runCli(['models', 'pull', 'acme/mid', '--config', config])).exitCode).toBe(0);
    // Out of the cache first: synced, then dropped (posix_fadvise DONTNEED through dd), as a cold node would have it.
    const blobs = join(cacheDir, 'hub', 'models--acme--mid', 'blobs');
    const files = readdirSync(blobs).map((n) => join(blobs, n));
    await dropFromPageCache(files);
    const r = await runCli(['models', 'warm', 'acme/mid', '--config', config, '--json']);
    expect(r.exitCode, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { bytes: number; readBytes: number; residentBefore: number; residentAfter: number; budgetBytes: number };
    expect(out.bytes).toBe(MID.length);
    expect(out.residentBefore).toBeLessThan(MID.length / 2);
    expect(out.readBytes).toBe(MID.length);
    expect(out.residentAfter).toBe(MID.length);
    const human = await runCli(['models', 'warm', 'acme/mid', '--config', config]);
    expect(human.stdout).toMatch(/^warmed acme\/mid: 1 MiB of 1 MiB in the page cache \(was 1 MiB\); read 1 MiB in [\d.]+s, budget 1 MiB$/m);
  });

  it('refuses a model not complete in the store, and a budget above MemAvailable, with one line each', async () => {
    const config = goodConfig();
    const absent = await runCli(['models', 'warm', 'acme/mid', '--config', config]);
    expect(absent.exitCode).toBe(1);
    expect(absent.stderr.trim().split('\n')).toEqual(['error: acme/mid is not complete in the store (llmgw models list): pull it first with llmgw models pull acme/mid']);
    expect((await runCli(['models', 'pull', 'acme/mid', '--config', config])).exitCode).toBe(0);
    const greedy = await runCli(['models', 'warm', 'acme/mid', '--config', config, '--budget', '999999999999999']);
    expect(greedy.exitCode).toBe(2);
    expect(greedy.stderr.trim().split('\n')).toHaveLength(1);
    expect(greedy.stderr).toMatch(/^error: --budget \d+ TiB is more than the host's MemAvailable \(.+\): a warm would push out what running engines use; give at most that$/m);
    const bad = await runCli(['models', 'warm', 'acme/mid', '--config', config, '--budget', 'lots']);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.trim()).toBe('error: --budget "lots" is not a size; give bytes or a size such as 40GiB');
  });
});
