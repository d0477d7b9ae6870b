import { describe, expect, it } from 'vitest';
import { AgentEventRing } from '../../../src/agent/events/agent-event-ring.js';

const ev = (message: string, atMs?: number) => ({ kind: 'shard' as const, shardId: 's1', message, fields: {}, atMs });

describe('AgentEventRing', () => {
  it('keeps the last events up to its capacity, numbered one more each, oldest first', () => {
    const ring = new AgentEventRing(3);
    for (const m of ['a', 'b', 'c', 'd', 'e']) ring.record(ev(m));
    expect(ring.list().map((e) => [e.seq, e.message])).toEqual([
      [3, 'c'],
      [4, 'd'],
      [5, 'e'],
    ]);
  });

  it('lists only what is after a seq and at or after a time', () => {
    const ring = new AgentEventRing();
    ring.record(ev('old', 1000));
    ring.record(ev('mid', 2000));
    ring.record(ev('new', 3000));
    expect(ring.list(0, 2000).map((e) => e.message)).toEqual(['mid', 'new']);
    expect(ring.list(2).map((e) => e.message)).toEqual(['new']);
  });

  it('tells each follower synchronously as an event is recorded, until it unsubscribes, and one that throws stops no other', () => {
    const ring = new AgentEventRing();
    const seen: string[] = [];
    ring.subscribe(() => {
      throw new Error('a broken follower');
    });
    const stop = ring.subscribe((e) => seen.push(e.message));
    ring.record(ev('one'));
    expect(seen).toEqual(['one']);
    stop();
    ring.record(ev('two'));
    expect(seen).toEqual(['one']);
    expect(ring.followers).toBe(1);
  });
});
