import { describe, expect, it } from 'vitest';
import { terminalShardsToCollect } from '../../../src/agent/supervisor/terminal-shard-gc.js';

const ended = (shardId: string, endedAtMs: number, running = false) => ({ shardId, endedAtMs, running });

describe('terminalShardsToCollect', () => {
  it('keeps the newest `keep` and forgets the oldest beyond', () => {
    const shards = [ended('a', 1), ended('b', 2), ended('c', 3), ended('d', 4)];
    expect(terminalShardsToCollect(shards, { keep: 2, retentionMs: 0, nowMs: 10 }).sort()).toEqual(['a', 'b']);
  });

  it('forgets what ended longer than the retention ago, whatever the count', () => {
    const shards = [ended('old', 0), ended('new', 900)];
    expect(terminalShardsToCollect(shards, { keep: 16, retentionMs: 500, nowMs: 1000 })).toEqual(['old']);
  });

  it('never forgets a shard whose engine may still run, though it counts toward keep', () => {
    const shards = [ended('live-old', 0, true), ended('x', 5), ended('y', 6)];
    expect(terminalShardsToCollect(shards, { keep: 1, retentionMs: 1, nowMs: 1000 }).sort()).toEqual(['x', 'y']);
    expect(terminalShardsToCollect([ended('live', 0, true)], { keep: 0, retentionMs: 1, nowMs: 1000 })).toEqual([]);
  });
});
