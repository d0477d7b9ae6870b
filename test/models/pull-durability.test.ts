import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ResultPromise, execa } from 'execa';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BIN } from '../helpers/run-cli.js';
import { FakeHub, bytes, fakeRepo, gitBlobId, sha256 } from './fake-hub.js';

/*
 * What a pull promises about the disk (issue 52, item 1), seen in the
 * system calls of the real `llmgw models pull` under strace: a large blob
 * is fdatasynced before its rename gives it its name; the small blobs
 * (renamed unsynced), the folders the blobs were renamed and the links
 * made in, are synced before the manifest's last rename says the model is
 * complete. And a pull killed in the middle leaves no blob under its name.
 */

const hub = new FakeHub();
const BIG = bytes(3 * 1024 * 1024, 31);
const SMALL = Buffer.from('{"model_type": "llama"}\n');
const NESTED = Buffer.from('{"version": "1.0"}\n');
hub.repos.set(
  'acme/durable',
  fakeRepo('acme/durable', [
    { path: 'model.safetensors', content: BIG, lfs: true },
    { path: 'config.json', content: SMALL, lfs: false },
    { path: 'tok/tokenizer.json', content: NESTED, lfs: false },
  ]),
);
const commit = hub.repos.get('acme/durable')?.commit as string;
const haveStrace = spawnSync('strace', ['-V']).status === 0;

let dir: string;
let cacheDir: string;
const children: ResultPromise[] = [];

beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-pull-durable-'));
  cacheDir = join(dir, 'cache');
  writeFileSync(join(dir, 'agent.yaml'), `models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n`);
  hub.trickle.clear();
});
afterEach(async () => {
  for (const c of children.splice(0)) {
    c.kill('SIGKILL');
    await c;
  }
  rmSync(dir, { recursive: true, force: true });
});

interface Call {
  name: string;
  /** The call's arguments as strace printed them, descriptors with their paths (-y). */
  args: string;
  start: number;
  end: number;
}

/** Every traced call of every thread (strace -ff writes a file per thread; -ttt -T give its start and duration). */
function readTrace(prefix: string): Call[] {
  const calls: Call[] = [];
  const folder = join(prefix, '..');
  for (const f of readdirSync(folder).filter((n) => n.startsWith('trace.'))) {
    for (const line of readFileSync(join(folder, f), 'utf8').split('\n')) {
      const m = /^(\d+\.\d+) (\w+)\((.*)\) += 0 <(\d+\.\d+)>$/.exec(line);
      if (m) calls.push({ start: Number(m[1]), name: m[2] as string, args: m[3] as string, end: Number(m[1]) + Number(m[4]) });
    }
  }
  return calls.sort((a, b) => a.start - b.start);
}

describe('a pull on disk', () => {
  it.skipIf(!haveStrace)('syncs each blob and the folders of its names before the manifest says complete; a large blob before its rename', async () => {
    const prefix = join(dir, 'trace');
    const traced = await execa('strace', ['-ff', '-qq', '-y', '-ttt', '-T', '-e', 'trace=fsync,fdatasync,rename,renameat,renameat2', '-o', prefix, process.execPath, BIN, 'models', 'pull', 'acme/durable', '--config', join(dir, 'agent.yaml')], {
      reject: false,
      stdin: 'ignore',
      env: { NO_COLOR: '1' },
    });
    expect(traced.exitCode, traced.stderr).toBe(0);
    const calls = readTrace(prefix);
    const repoDir = join(cacheDir, 'hub', 'models--acme--durable');
    const blobs = join(repoDir, 'blobs');
    const manifest = join(cacheDir, 'llmgw', 'models', 'models--acme--durable.json');
    const renamedTo = (path: string) => calls.filter((c) => /^rename/.test(c.name) && c.args.endsWith(`"${path}"`));
    const synced = (path: string) => calls.filter((c) => /sync$/.test(c.name) && c.args.startsWith(`${/^\d+/.exec(c.args)?.[0]}<${path}>`));

    // The manifest is renamed into place twice (the pull begun, the model complete); the last one says complete.
    const complete = renamedTo(manifest).at(-1) as Call;
    expect(complete).toBeDefined();
    expect(JSON.parse(readFileSync(manifest, 'utf8')).snapshots[commit].complete).toBe(true);

    // The large blob: its bytes synced under its .incomplete name, then renamed.
    const big = join(blobs, sha256(BIG));
    const bigRename = renamedTo(big)[0] as Call;
    expect(bigRename).toBeDefined();
    expect(synced(`${big}.incomplete`).some((c) => c.end <= bigRename.start)).toBe(true);
    // The small ones: renamed first, synced under their names before the manifest's last rename.
    for (const content of [SMALL, NESTED]) {
      const path = join(blobs, gitBlobId(content));
      expect(renamedTo(path)).toHaveLength(1);
      expect(synced(path).some((c) => c.end <= complete.start)).toBe(true);
    }
    // The folders: the blobs' renames and the links, each folder synced after the last entry made in it.
    const snapshot = join(repoDir, 'snapshots', commit);
    const lastIn = (folder: string) => Math.max(...calls.filter((c) => /^rename/.test(c.name) && new RegExp(`"${folder}/[^/]+"$`).test(c.args)).map((c) => c.end));
    for (const folder of [blobs, snapshot, join(snapshot, 'tok')]) {
      const after = synced(folder).filter((c) => c.start >= lastIn(folder) && c.end <= complete.start);
      expect(after.length, `${folder} synced after its last entry and before the manifest says complete`).toBeGreaterThan(0);
    }
    // Look-alike: the manifest begun (complete: false) came before any blob was renamed into place.
    const begun = renamedTo(manifest)[0] as Call;
    expect(begun).not.toBe(complete);
    expect(begun.end).toBeLessThanOrEqual(bigRename.start);
  });

  it('leaves no blob under its name when killed in the middle, only the partial file, and the model incomplete', async () => {
    hub.trickle.set('model.safetensors', 32 * 1024);
    const config = join(dir, 'agent.yaml');
    const first = execa(process.execPath, [BIN, 'models', 'pull', 'acme/durable', '--config', config], { reject: false, stdin: 'ignore', env: { NO_COLOR: '1' } });
    children.push(first);
    const blobs = join(cacheDir, 'hub', 'models--acme--durable', 'blobs');
    const partial = join(blobs, `${sha256(BIG)}.incomplete`);
    const end = Date.now() + 30_000;
    while ((statSafe(partial) ?? 0) < 256 * 1024) {
      if (Date.now() > end) throw new Error('no part of the blob on disk within 30 s');
      await new Promise((r) => setTimeout(r, 25));
    }
    first.kill('SIGKILL');
    expect((await first).signal).toBe('SIGKILL');
    const names = readdirSync(blobs);
    expect(names).toContain(`${sha256(BIG)}.incomplete`);
    expect(names).not.toContain(sha256(BIG));
    const record = JSON.parse(readFileSync(join(cacheDir, 'llmgw', 'models', 'models--acme--durable.json'), 'utf8'));
    expect(record.snapshots[commit].complete).toBe(false);
    // Look-alike: the same pull let run completes, and then the blob has its name.
    hub.trickle.clear();
    const second = await execa(process.execPath, [BIN, 'models', 'pull', 'acme/durable', '--config', config], { reject: false, stdin: 'ignore', env: { NO_COLOR: '1' } });
    expect(second.exitCode, second.stderr).toBe(0);
    expect(readdirSync(blobs).sort()).toEqual([sha256(BIG), gitBlobId(SMALL), gitBlobId(NESTED)].sort());
  });
});

function statSafe(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined;
  }
}
