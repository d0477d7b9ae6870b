import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pruneShardLogs, shardIdOfAnyLog, shardIdOfPreviousRun } from '../../../src/lib/files/prune-shard-logs.js';

const HOUR = 3_600_000;
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-prune-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A log file of `bytes` bytes last written `ageH` hours ago. */
function log(name: string, bytes: number, ageH: number): void {
  writeFileSync(join(dir, name), 'x'.repeat(bytes));
  const t = (Date.now() - ageH * HOUR) / 1000;
  utimesSync(join(dir, name), t, t);
}

describe('shardIdOfAnyLog', () => {
  it.each([
    ['a.log', 'a'],
    ['a.log.1', 'a'],
    ['a.failure.json', 'a'],
    ['a.1.log', 'a.1'],
    ['x.service.log', 'x.service'],
    ['a.log.1.tmp', undefined],
    ['notes.txt', undefined],
  ])('%s is a log of %s', (name, id) => {
    expect(shardIdOfAnyLog(name)).toBe(id);
  });
});

describe('shardIdOfPreviousRun', () => {
  it.each([
    ['a.1.log', 'a'],
    ['a.3.failure.json', 'a'],
    ['a.1.2.log', 'a.1'],
    ['a.log', undefined],
    ['a.x.log', undefined],
  ])('%s is a kept run of %s', (name, id) => {
    expect(shardIdOfPreviousRun(name)).toBe(id);
  });
});

describe('pruneShardLogs', () => {
  it('removes every generation of logs older than the retention, crash evidence and kept runs included', async () => {
    log('old.log', 10, 200);
    log('old.log.1', 10, 201);
    log('old.failure.json', 10, 200);
    log('new.log', 10, 1);
    mkdirSync(join(dir, 'previous-runs'));
    log('previous-runs/old.1.log', 10, 300);
    log('previous-runs/old.1.failure.json', 10, 300);
    log('previous-runs/new.1.log', 10, 2);
    const removed = await pruneShardLogs({ dir, previousRunsDir: join(dir, 'previous-runs'), maxAgeMs: 168 * HOUR, maxTotalBytes: 1e9, keep: () => false });
    expect(removed.sort()).toEqual(['old.failure.json', 'old.log', 'old.log.1', 'previous-runs/old.1.failure.json', 'previous-runs/old.1.log']);
    expect(readdirSync(dir).sort()).toEqual(['new.log', 'previous-runs']);
    expect(readdirSync(join(dir, 'previous-runs'))).toEqual(['new.1.log']);
  });

  it("never removes a kept shard's earlier runs", async () => {
    mkdirSync(join(dir, 'previous-runs'));
    log('previous-runs/live.1.log', 10, 999);
    const removed = await pruneShardLogs({ dir, previousRunsDir: join(dir, 'previous-runs'), maxAgeMs: HOUR, maxTotalBytes: 1, keep: (id) => id === 'live' });
    expect(removed).toEqual([]);
  });

  it('cuts the rest to the size bound, oldest first', async () => {
    log('a.log', 400, 5);
    log('b.log', 400, 4);
    log('c.log', 400, 3);
    const removed = await pruneShardLogs({ dir, maxAgeMs: 0, maxTotalBytes: 500, keep: () => false });
    expect(removed).toEqual(['a.log', 'b.log']);
    expect(readdirSync(dir)).toEqual(['c.log']);
  });

  it('never touches a kept shard, however old or large, nor counts it against the bound', async () => {
    log('live.log', 5000, 999);
    log('live.log.1', 5000, 999);
    log('gone.log', 10, 1);
    const removed = await pruneShardLogs({ dir, maxAgeMs: HOUR / 2, maxTotalBytes: 100, keep: (id) => id === 'live' });
    expect(removed).toEqual(['gone.log']);
    expect(readdirSync(dir).sort()).toEqual(['live.log', 'live.log.1']);
  });

  it('removes a planted symlink itself, never what it points at', async () => {
    const victim = join(mkdtempSync(join(tmpdir(), 'llmgw-prune-victim-')), 'precious');
    writeFileSync(victim, 'keep me');
    symlinkSync(victim, join(dir, 'evil.log'));
    await pruneShardLogs({ dir, maxAgeMs: 1, maxTotalBytes: 1, keep: () => false });
    expect(existsSync(victim)).toBe(true);
    rmSync(join(victim, '..'), { recursive: true, force: true });
  });
});
