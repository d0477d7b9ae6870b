import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { askWithTls, type PeerReply } from '../../../src/agent/gang/ask-peer.js';
import { firstToGo } from '../../../src/agent/gang/first-to-go.js';
import { type GangRankAnswer, gangAnswer, parseGangAnswer } from '../../../src/agent/gang/gang-answer.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import type { ShardSnapshot, ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { GangMemberSchema, GangSchema, ShardState, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { parseStartShard } from '../../../src/lib/shard-id.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';

/*
 * Issue 47 item 3: a gang's survivors end too (SGLang ranks within a
 * second of a peer's death; vLLM's rank 0 after the execute-model timeout),
 * so a rank whose engine ended asks its peers once who went first, and
 * names that rank, or nobody when it went first itself.
 */

const ENDED = Date.parse('2026-12-06T07:00:10.000Z');

function gangSpec(rank: number, endpoints: string[]) {
  const members = endpoints.map((agentEndpoint, r) => create(GangMemberSchema, { rank: r, nodeId: `node-${String.fromCharCode(97 + r)}`, shardId: `g-0-g1-r${r}`, agentEndpoint }));
  return create(StartShardSchema, {
    shardId: `g-0-g1-r${rank}`,
    replicaId: 'g-0',
    rank,
    nnodes: endpoints.length,
    leaderAddr: '127.0.0.1',
    leaderPort: 29500,
    profile: { name: 'p', engine: 'sglang', model: 'm', servedModelName: 'm' },
    gang: create(GangSchema, { gangId: 'g-0-g1', members }),
  });
}

const rank = (r: number, over: Partial<GangRankAnswer> = {}): GangRankAnswer => ({ rank: r, shard: `g-0-g1-r${r}`, state: 'READY', running: true, stalled: false, error: '', ...over });
const answer = (...ranks: GangRankAnswer[]): PeerReply => ({ ok: true, answer: { node: 'n', ranks } });

/** Rank 0 of a three-rank gang whose engine ended at ENDED, its peers answering `replies`. */
async function ask(replies: Record<string, PeerReply>, over: Partial<ShardSnapshot> = {}) {
  const spec = gangSpec(0, ['10.0.0.1:7471', '10.0.0.2:7471', '10.0.0.3:7471']);
  const me = shardSnapshot(spec.shardId, { spec, running: false, endedAtMs: ENDED, ...over });
  const asked: string[] = [];
  const fault = await firstToGo(async (endpoint) => {
    asked.push(endpoint);
    return replies[endpoint] ?? { ok: false, cause: 'unknown', why: `agent ${endpoint} not asked: tls` };
  }, me, ENDED);
  return { fault, asked };
}

describe('the first to go', () => {
  it('is the peer whose agent says its rank ended before this one, the earliest of them, named with when and why', async () => {
    const { fault, asked } = await ask({
      '10.0.0.2:7471': answer(rank(1, { state: 'FAILED', running: false, error: 'engine was killed by SIGKILL', endedAtMs: ENDED - 300 })),
      '10.0.0.3:7471': answer(rank(2, { state: 'FAILED', running: false, error: 'engine exited with code 1', endedAtMs: ENDED - 10 })),
    });
    expect(asked.sort()).toEqual(['10.0.0.2:7471', '10.0.0.3:7471']);
    expect(fault).toEqual({
      rank: 1,
      nodeId: 'node-b',
      shardId: 'g-0-g1-r1',
      reason: 'rank 1 on node-b went first: FAILED at 2026-12-06T07:00:09.700Z (engine was killed by SIGKILL)',
      sinceMs: ENDED - 300,
      stalled: false,
      firstToGo: true,
    });
  });

  it('is nobody when this rank went first: its peers still run, or ended after it (they followed)', async () => {
    const followed = { '10.0.0.2:7471': answer(rank(1, { state: 'FAILED', running: false, endedAtMs: ENDED + 40 })), '10.0.0.3:7471': answer(rank(2)) };
    expect((await ask(followed)).fault).toBeUndefined();
    // Engine gone, not yet reported (its agent is asking too): running false is enough, when it says when.
    expect((await ask({ '10.0.0.2:7471': answer(rank(1, { running: false, endedAtMs: ENDED + 5 })) })).fault).toBeUndefined();
  });

  it('is a peer that cannot be reached (refused, silent), after any that ended before; a failure of ours names nobody', async () => {
    const refused: PeerReply = { ok: false, cause: 'refused', why: 'agent 10.0.0.3:7471: connect ECONNREFUSED' };
    expect((await ask({ '10.0.0.2:7471': answer(rank(1)), '10.0.0.3:7471': refused })).fault).toMatchObject({ rank: 2, reason: 'rank 2 on node-c went first: unreachable as this rank ended (agent 10.0.0.3:7471: connect ECONNREFUSED)', firstToGo: true });
    const gone = answer(rank(1, { state: 'EXITED', running: false, endedAtMs: ENDED - 1 }));
    expect((await ask({ '10.0.0.2:7471': gone, '10.0.0.3:7471': refused })).fault?.rank).toBe(1);
    expect((await ask({})).fault).toBeUndefined();
  });

  it('is the peer the gang watch had already found gone, without asking; a stall names nobody', async () => {
    const known = { rank: 1, nodeId: 'node-b', shardId: 'g-0-g1-r1', reason: 'rank 1 on node-b is FAILED', sinceMs: ENDED - 2_000, stalled: false };
    const { fault, asked } = await ask({}, { gangFault: known });
    expect(fault).toEqual({ ...known, firstToGo: true });
    expect(asked).toEqual([]);
    expect((await ask({}, { gangFault: { ...known, stalled: true } })).fault).toBeUndefined();
  });
});

describe('when a rank ended, in the gang answer', () => {
  it('is told by the agent once its engine is gone, and read back only as a time', () => {
    const spec = gangSpec(1, ['10.0.0.1:7471', '10.0.0.2:7471']);
    const a = gangAnswer('node-b', 'g-0-g1', [shardSnapshot(spec.shardId, { spec, state: ShardState.FAILED, running: false, endedAtMs: ENDED })]);
    expect(a.ranks[0]?.endedAtMs).toBe(ENDED);
    expect(parseGangAnswer(JSON.stringify(a))).toEqual(a);
    expect(gangAnswer('node-b', 'g-0-g1', [shardSnapshot(spec.shardId, { spec })]).ranks[0]).not.toHaveProperty('endedAtMs');
    expect(parseGangAnswer(JSON.stringify({ node: 'n', ranks: [rank(1, { endedAtMs: -1 })] }))).toMatch(/endedAtMs/);
    expect(parseGangAnswer(JSON.stringify({ node: 'n', ranks: [{ ...rank(1), endedAtMs: 'soon' }] }))).toMatch(/endedAtMs/);
  });
});

describe('a gang rank whose engine ended, through the supervisor', () => {
  const harness = useSupervisors();

  /** Rank 1 (a worker) under a real supervisor, its peer rank 0 answered by a real gang endpoint holding `peer`. */
  async function workerWithPeer(peer: () => ShardSnapshot) {
    const endpoint = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-a', shards: () => [peer()], tls: () => ({ tls: undefined }), log: captureLogger('info').logger });
    onTestFinished(() => void endpoint.server.close());
    const ask = askWithTls(() => ({ tls: undefined }));
    const sup = harness.newSupervisor({}, { firstToGo: (s, at) => firstToGo(ask, s, at) });
    const spec = parseStartShard(gangSpec(1, [endpoint.endpoint, '127.0.0.1:1']));
    const seen: ShardTransition[] = [];
    sup.on('transition', (t) => seen.push(t));
    const { shard } = await sup.start(spec, { plan: { argv: [process.execPath, '-e', 'setInterval(()=>{},1<<30)'], env: {} }, servesHttp: false });
    await sup.settle(shard.shardId, {});
    expect(sup.get(shard.shardId)?.state).toBe(ShardState.READY);
    const failed = new Promise<ShardTransition>((resolve) => sup.on('transition', (t) => t.to === ShardState.FAILED && resolve(t)));
    return { sup, shard, failed, seen };
  }

  const leader = (over: Partial<ShardSnapshot>) => shardSnapshot('g-0-g1-r0', { spec: gangSpec(0, ['127.0.0.1:1', '127.0.0.1:2']), ...over });

  it('names the rank that ended first (an SGLang rank 0 SIGKILLed, this rank killed in its wake) in its FAILED status and gang break', async () => {
    let peer = leader({});
    const { shard, failed } = await workerWithPeer(() => peer);
    peer = leader({ state: ShardState.FAILED, running: false, error: 'engine was killed by SIGKILL', endedAtMs: Date.now() - 5 });
    process.kill(shard.pid, 'SIGKILL');
    const t = await failed;
    expect(t.shard.error).toMatch(/^engine was killed by SIGKILL; gang broken: rank 0 on node-a went first: FAILED at \S+Z \(engine was killed by SIGKILL\)$/);
    expect(t.shard.gangFault).toMatchObject({ rank: 0, nodeId: 'node-a', shardId: 'g-0-g1-r0', firstToGo: true, stalled: false });
  });

  it('names nobody when it went first: its peer still runs', async () => {
    const { shard, failed } = await workerWithPeer(() => leader({}));
    process.kill(shard.pid, 'SIGKILL');
    const t = await failed;
    expect(t.shard.error).toBe('engine was killed by SIGKILL');
    expect(t.shard.gangFault).toBeUndefined();
  });
});
