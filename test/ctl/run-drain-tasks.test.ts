import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { DrainProgressSchema, DrainResponseSchema, type DrainResponse } from '../../src/gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type DrainWatch, runDrainTasks } from '../../src/ctl/run-drain-tasks.js';

type Row = [shardId: string, inFlight: number, countable?: boolean];

function response(rows: Row[], timedOut = false): DrainResponse {
  return create(DrainResponseSchema, {
    shards: rows.map(([shardId, inFlight, countable = true]) => create(DrainProgressSchema, { shardId, state: ShardState.DRAINING, inFlight, countable })),
    timedOut,
  });
}

/** A drain stream the test drives: push() a message, end() or fail() the stream. */
function fakeWatch(first: DrainResponse) {
  let latest = first;
  const listeners = new Set<() => void>();
  let end!: () => void;
  let fail!: (e: unknown) => void;
  const ended = new Promise<void>((res, rej) => {
    end = res;
    fail = rej;
  });
  ended.catch(() => {});
  const watch: DrainWatch = {
    latest: () => latest,
    subscribe: (f) => {
      listeners.add(f);
      return () => listeners.delete(f);
    },
    ended,
  };
  return {
    watch,
    listeners,
    push(r: DrainResponse) {
      latest = r;
      for (const f of [...listeners]) f();
    },
    end,
    fail,
  };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

describe('runDrainTasks, simple renderer', () => {
  it('says one line per shard per change, and ends when every shard is drained', async () => {
    const lines: string[] = [];
    const w = fakeWatch(response([['s1', 3], ['s2', 1]]));
    let done = false;
    const run = runDrainTasks(w.watch, 'simple', (l) => lines.push(l)).then(() => {
      done = true;
    });
    expect(lines).toEqual(['s1: DRAINING, 3 in flight', 's2: DRAINING, 1 in flight']);
    w.push(response([['s1', 3], ['s2', 0]]));
    expect(lines.slice(2)).toEqual(['s2: DRAINING, 0 in flight']);
    w.push(response([['s1', 3], ['s2', 0]]));
    expect(lines).toHaveLength(3);
    await tick();
    expect(done).toBe(false);
    w.push(response([['s1', 0], ['s2', 0]]));
    await run;
    expect(lines.slice(3)).toEqual(['s1: DRAINING, 0 in flight']);
    expect(w.listeners.size).toBe(0);
  });

  it('does not wait for a worker rank, whose count cannot be read', async () => {
    const lines: string[] = [];
    const w = fakeWatch(response([['w1', -1, false]]));
    await runDrainTasks(w.watch, 'simple', (l) => lines.push(l));
    expect(lines).toEqual(['w1: DRAINING, no in-flight count (serves no HTTP; its leader carries the traffic)']);
  });

  it('marks the shards still in flight at the timeout, and ends', async () => {
    const lines: string[] = [];
    const w = fakeWatch(response([['s1', 2], ['s2', 1]]));
    const run = runDrainTasks(w.watch, 'simple', (l) => lines.push(l));
    w.push(response([['s1', 2], ['s2', 0]], true));
    await run;
    expect(lines).toEqual(['s1: DRAINING, 2 in flight', 's2: DRAINING, 1 in flight', 's2: DRAINING, 0 in flight']);

    const lines2: string[] = [];
    const w2 = fakeWatch(response([['s1', 2]]));
    const run2 = runDrainTasks(w2.watch, 'simple', (l) => lines2.push(l));
    w2.push(response([['s1', 1]], true));
    await run2;
    expect(lines2).toEqual(['s1: DRAINING, 2 in flight', 's1: DRAINING, 1 in flight at the timeout']);
  });

  it('says an unreadable count as such', async () => {
    const lines: string[] = [];
    const w = fakeWatch(response([['s1', -1]], true));
    await runDrainTasks(w.watch, 'simple', (l) => lines.push(l));
    expect(lines).toEqual(["s1: DRAINING, in-flight count unreadable (the engine's /metrics did not answer) at the timeout"]);
  });

  it('ends with the stream, having said its last message, and resolves when it fails (the caller reports that)', async () => {
    const lines: string[] = [];
    const w = fakeWatch(response([['s1', 2]]));
    const run = runDrainTasks(w.watch, 'simple', (l) => lines.push(l));
    w.push(response([['s1', 1]]));
    w.end();
    await run;
    expect(lines).toEqual(['s1: DRAINING, 2 in flight', 's1: DRAINING, 1 in flight']);
    expect(w.listeners.size).toBe(0);

    const w2 = fakeWatch(response([['s1', 2]]));
    const run2 = runDrainTasks(w2.watch, 'simple', () => {});
    w2.fail(new Error('stream reset'));
    await expect(run2).resolves.toBeUndefined();
    expect(w2.listeners.size).toBe(0);
  });
});
