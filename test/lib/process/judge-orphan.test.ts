import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { findRecordedShardIds, findShardLogWriters, judgeOrphan, type ShardDirs } from '../../../src/lib/process/judge-orphan.js';
import { shardLogDir, shardLogPath, shardStateDir, shardStatePath } from '../../../src/lib/shard-layout.js';
import { until } from '../../helpers/engine-processes.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

let root: string;
let dirs: ShardDirs;
const started: ChildProcess[] = [];
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-judge-'));
  dirs = { stateDir: join(root, 'state'), logDir: join(root, 'log') };
  mkdirSync(shardStateDir(dirs.stateDir), { recursive: true });
  mkdirSync(shardLogDir(dirs.logDir), { recursive: true });
});
afterEach(() => {
  for (const c of started.splice(0)) c.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

/** A process in its own group writing shard `id`'s log on fd 1, as an engine does. */
function logWriter(id: string): ChildProcess {
  const fd = openSync(shardLogPath(dirs.logDir, id), 'a');
  try {
    const child = spawn('sleep', ['30'], { detached: true, stdio: ['ignore', fd, 'ignore'] });
    started.push(child);
    return child;
  } finally {
    closeSync(fd);
  }
}

describe('findShardLogWriters', () => {
  it('finds the writers of every shard log in one scan, and judgeOrphan judges each shard from it', async () => {
    // s1: a state file nothing can read, but a process writes its log; s2: only a writer, no state file.
    writeFileSync(shardStatePath(dirs.stateDir, 's1'), '{ not json');
    const w1 = logWriter('s1');
    const w2 = logWriter('s2');
    await until(() => findShardLogWriters(dirs).size === 2, 'both writers to be seen');
    const writers = findShardLogWriters(dirs);
    expect(findRecordedShardIds(dirs, () => {}, writers)).toEqual(['s1', 's2']);
    const s1 = judgeOrphan(dirs, parseShardId('s1'), writers);
    expect(s1).toMatchObject({ alive: true, identified: false, pid: w1.pid });
    expect(judgeOrphan(dirs, parseShardId('s2'), writers)).toMatchObject({ alive: true, identified: false, pid: w2.pid });
    // The same verdict as a scan of its own, which the judgement no longer needs.
    expect(judgeOrphan(dirs, parseShardId('s1'))).toEqual(s1);
  });

  it('is the scan the shards are judged from: a writer gone since is still the one it saw', async () => {
    writeFileSync(shardStatePath(dirs.stateDir, 's1'), '{ not json');
    const w = logWriter('s1');
    await until(() => findShardLogWriters(dirs).size === 1, 'the writer to be seen');
    const writers = findShardLogWriters(dirs);
    w.kill('SIGKILL');
    await until(() => findShardLogWriters(dirs).size === 0, 'the writer to be gone');
    // Judged from the scan it was given (one for the whole recovery), not from a new one per shard.
    expect(judgeOrphan(dirs, parseShardId('s1'), writers)).toMatchObject({ alive: true, pid: w.pid });
    expect(judgeOrphan(dirs, parseShardId('s1'))).toMatchObject({ alive: false, pid: 0 });
  });
});
