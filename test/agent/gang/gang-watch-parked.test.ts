import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GANG_POLL_INTERVAL_MS, GangWatch } from '../../../src/agent/gang/gang-watch.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { GangMemberSchema, GangSchema, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';

/*
 * The gang watch parks while the node runs no multi-node rank (a round a
 * second of nothing woke the agent for nothing, bench figures 5b and 16) and
 * starts again when poked by a change of one (run-agent.ts wires
 * Supervisor.react to poke): a rank that comes is asked about at the same
 * one round a second, never two loops at once.
 */

const members = ['node-a', 'node-b'].map((nodeId, rank) => create(GangMemberSchema, { rank, nodeId, shardId: `g-0-g1-r${rank}`, agentEndpoint: `127.0.0.1:${7470 + rank}` }));

function rank1(): ShardSnapshot {
  const spec = create(StartShardSchema, { shardId: 'g-0-g1-r1', replicaId: 'g-0', rank: 1, nnodes: 2, leaderAddr: '127.0.0.1', leaderPort: 29500, gang: create(GangSchema, { gangId: 'g-0-g1', members }) });
  return shardSnapshot(spec.shardId, { replicaId: 'g-0', spec, pid: 1, servesHttp: false, logPath: '' });
}

function watch(shards: ShardSnapshot[]) {
  const asked: number[] = [];
  let listed = 0;
  const w = new GangWatch({
    nodeId: 'node-b',
    shards: () => {
      listed++;
      return shards;
    },
    mark: () => {},
    log: captureLogger('info').logger,
    ask: async () => {
      asked.push(Date.now());
      return { ok: true, answer: { node: 'node-a', ranks: [{ rank: 0, shard: 'g-0-g1-r0', state: 'READY', running: true, stalled: false, error: '' }] } };
    },
    probe: async () => ({ ok: true }),
  });
  return { w, asked, listed: () => listed };
}

afterEach(() => vi.useRealTimers());

describe('the gang watch with no multi-node rank', () => {
  it('parks: no round, no timer, until poked', async () => {
    vi.useFakeTimers();
    const { w, listed } = watch([]);
    w.start();
    expect(w.parked).toBe(true);
    await vi.advanceTimersByTimeAsync(5 * GANG_POLL_INTERVAL_MS);
    // Looked once, at start, and not since: no wake a second.
    expect(listed()).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
    w.close();
  });

  it('a rank that comes is watched a round a second from the poke, and parks again once it is gone', async () => {
    vi.useFakeTimers();
    const shards: ShardSnapshot[] = [];
    const { w, asked } = watch(shards);
    w.start();
    shards.push(rank1());
    w.poke();
    // Pokes while it runs (every transition of the rank pokes) start no second loop.
    w.poke();
    expect(w.parked).toBe(false);
    await vi.advanceTimersByTimeAsync(10);
    expect(asked).toHaveLength(1);
    w.poke();
    await vi.advanceTimersByTimeAsync(3 * GANG_POLL_INTERVAL_MS);
    expect(asked).toHaveLength(4);
    for (let i = 1; i < asked.length; i++) expect((asked[i] as number) - (asked[i - 1] as number)).toBe(GANG_POLL_INTERVAL_MS);
    shards.length = 0;
    await vi.advanceTimersByTimeAsync(GANG_POLL_INTERVAL_MS);
    expect(w.parked).toBe(true);
    await vi.advanceTimersByTimeAsync(5 * GANG_POLL_INTERVAL_MS);
    expect(asked).toHaveLength(4);
    w.close();
  });

  it('a watch started with a rank runs without a poke, as before', async () => {
    vi.useFakeTimers();
    const { w, asked } = watch([rank1()]);
    w.start();
    expect(w.parked).toBe(false);
    await vi.advanceTimersByTimeAsync(2 * GANG_POLL_INTERVAL_MS + 10);
    expect(asked).toHaveLength(3);
    w.close();
    await vi.advanceTimersByTimeAsync(3 * GANG_POLL_INTERVAL_MS);
    expect(asked).toHaveLength(3);
  });

  it('a poke after close starts nothing', async () => {
    vi.useFakeTimers();
    const shards: ShardSnapshot[] = [];
    const { w, asked } = watch(shards);
    w.start();
    w.close();
    shards.push(rank1());
    w.poke();
    await vi.advanceTimersByTimeAsync(3 * GANG_POLL_INTERVAL_MS);
    expect(asked).toHaveLength(0);
  });
});
