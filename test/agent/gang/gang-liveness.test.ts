import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { PeerReply, ProbeResult } from '../../../src/agent/gang/ask-peer.js';
import type { GangRankAnswer } from '../../../src/agent/gang/gang-answer.js';
import { GANG_LIVENESS, rank0Evidence } from '../../../src/agent/gang/gang-liveness.js';
import { GangWatch, type GangWatchParts } from '../../../src/agent/gang/gang-watch.js';
import type { GangFault } from '../../../src/agent/supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { GangMemberSchema, GangSchema, ProfileSchema, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';

/*
 * Issue 47 items 1 and 2: what proves a gang's rank 0 alive after start-up,
 * per engine and shape (gang-liveness.ts), and how soon a silent node is
 * seen. Each judgement with its true positive and its innocent look-alikes:
 * the rpc port vLLM closes by design, the TCPStore bound late, the agent
 * restarting, a failure that is ours. Rank 1's view of rank 0, round by
 * round, with peers that answer what each case needs.
 */

const T0 = 1_000_000;
const STARTUP_TIMEOUT_MS = 10 * 60_000;
const LEADER_API_PORT = 8100;

type Engine = 'vllm-dp' | 'vllm-tp' | 'sglang';

/** Rank 1 (or `rank`) of a two-node gang of `engine`, READY, started at T0. */
function rank1(engine: Engine, opts: { gangAddr?: boolean; leaderApiPort?: number; rank?: number } = {}): ShardSnapshot {
  const me = opts.rank ?? 1;
  const endpoint = (r: number) => (opts.gangAddr === false ? '' : `127.0.0.1:${7470 + r}`);
  const members = ['node-a', 'node-b'].map((nodeId, rank) =>
    create(GangMemberSchema, { rank, nodeId, shardId: `g-0-g1-r${rank}`, agentEndpoint: endpoint(rank), httpPort: rank === 0 ? (opts.leaderApiPort ?? LEADER_API_PORT) : 0 }),
  );
  const profile = create(ProfileSchema, {
    engine: engine === 'sglang' ? 'sglang' : 'vllm',
    model: 'm',
    args: engine === 'vllm-dp' ? ['--data-parallel-size', '2'] : [],
    startupTimeout: durationFromMs(STARTUP_TIMEOUT_MS),
  });
  const spec = create(StartShardSchema, { shardId: `g-0-g1-r${me}`, replicaId: 'g-0', rank: me, nnodes: 2, httpPort: 8101, leaderAddr: '127.0.0.1', leaderPort: 29500, profile, gang: create(GangSchema, { gangId: 'g-0-g1', members }) });
  return shardSnapshot(spec.shardId, { replicaId: 'g-0', spec, pid: 1, servesHttp: me === 0, logPath: '', startedAtMs: T0 });
}

const ready = (over: Partial<GangRankAnswer> = {}): PeerReply => ({ ok: true, answer: { node: 'node-a', ranks: [{ rank: 0, shard: 'g-0-g1-r0', state: 'READY', running: true, stalled: false, error: '', ...over }] } });
const refused = (what: string): { ok: false; cause: 'refused'; why: string } => ({ ok: false, cause: 'refused', why: `${what}: connect ECONNREFUSED` });
const OPEN: ProbeResult = { ok: true };

interface Peer {
  agent: PeerReply | 'silent';
  port: ProbeResult | 'silent';
  health: ProbeResult | 'silent';
}

/** A watch of `s` whose peer says what `peer` holds now; counts what was asked. */
function watch(s: ShardSnapshot, peer: Peer, over: Partial<GangWatchParts> = {}) {
  const marks: { atMs: number; fault: GangFault | undefined }[] = [];
  const asked = { agent: 0, port: 0, health: 0 };
  const clock = { now: T0 };
  const now = over.now ?? (() => clock.now);
  const silent = <T>(what: string, timeoutMs: number, value: T | 'silent'): Promise<T> =>
    value === 'silent'
      ? new Promise((resolve) => setTimeout(() => resolve({ ok: false, cause: 'silent', why: `${what}: no answer within ${timeoutMs} ms` } as T), timeoutMs))
      : Promise.resolve(value);
  const log = captureLogger('info');
  const w = new GangWatch({
    nodeId: 'node-b',
    shards: () => [s],
    mark: (_id, f) => {
      marks.push({ atMs: now(), fault: f });
      s.gangFault = f;
    },
    log: log.logger,
    ask: (endpoint, _gang, timeoutMs) => {
      asked.agent++;
      return silent(`agent ${endpoint}`, timeoutMs, peer.agent);
    },
    probe: (_h, _p, timeoutMs) => {
      asked.port++;
      return silent('connect', timeoutMs, peer.port);
    },
    probeHealth: (_h, _p, timeoutMs) => {
      asked.health++;
      return silent('health', timeoutMs, peer.health);
    },
    ...over,
    now,
  });
  /** Rounds every second of fake time from `fromMs` (after T0) to `toMs`. */
  const roundsOver = async (fromMs: number, toMs: number) => {
    for (clock.now = T0 + fromMs; clock.now <= T0 + toMs; clock.now += 1_000) await w.round();
  };
  return { w, marks, asked, clock, roundsOver, records: log.records };
}

describe('what proves rank 0 alive, per engine and shape', () => {
  it('writes it down with its source for every engine the agent runs, and picks it from the profile', () => {
    for (const r of GANG_LIVENESS) expect(`${r.holds} ${r.notEvidence}`).toMatch(/(V|S):[\w/.]+:\d+|src\/sim\//);
    const [dp, tp, sg] = [rank1('vllm-dp'), rank1('vllm-tp'), rank1('sglang')];
    expect(rank0Evidence(dp.spec, dp.spec.gang!.members[0]!)).toMatchObject({ kind: 'api-health', port: LEADER_API_PORT });
    expect(rank0Evidence(tp.spec, tp.spec.gang!.members[0]!)).toMatchObject({ kind: 'rendezvous-port', port: 29500 });
    expect(rank0Evidence(sg.spec, sg.spec.gang!.members[0]!)).toMatchObject({ kind: 'rendezvous-port', port: 29500 });
    const old = rank1('vllm-dp', { leaderApiPort: 0 });
    expect(rank0Evidence(old.spec, old.spec.gang!.members[0]!).kind).toBe('none');
    expect(rank0Evidence(tp.spec, tp.spec.gang!.members[1]!).kind).toBe('none');
  });
});

describe('a vLLM data-parallel gang (its rpc port closes by design once its engines are up)', () => {
  it('is not broken with gang_addr unset, its rpc port refused and rank 0 answering /health, for two minutes', async () => {
    const { marks, asked, roundsOver } = watch(rank1('vllm-dp', { gangAddr: false }), { agent: refused('x'), port: refused('rpc'), health: OPEN });
    await roundsOver(10_000, 130_000);
    expect(marks).toEqual([]);
    expect(asked.port).toBe(0);
  });

  it('is not broken with gang_addr unset and no API port known: nothing is evidence, even past the start-up deadline', async () => {
    const { marks, roundsOver } = watch(rank1('vllm-dp', { gangAddr: false, leaderApiPort: 0 }), { agent: refused('x'), port: refused('rpc'), health: refused('api') });
    await roundsOver(STARTUP_TIMEOUT_MS, STARTUP_TIMEOUT_MS + 30_000);
    expect(marks).toEqual([]);
  });

  it("is broken at once when rank 0's agent says its engine FAILED", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-dp'), { agent: ready({ state: 'FAILED', running: false, error: 'engine exited with code 1' }), port: refused('rpc'), health: OPEN });
    await roundsOver(20_000, 20_000);
    expect(marks[0]?.fault).toMatchObject({ rank: 0, reason: 'rank 0 on node-a is FAILED: engine exited with code 1' });
  });

  it("is broken at once when rank 0's engine is gone while its agent still tells how, then named by the state it tells", async () => {
    const peer: Peer = { agent: ready({ running: false, endedAtMs: T0 + 19_500 }), port: refused('rpc'), health: OPEN };
    const { marks, roundsOver } = watch(rank1('vllm-dp'), peer);
    await roundsOver(20_000, 20_000);
    expect(marks[0]?.fault?.reason).toBe(`rank 0 on node-a's engine ended at ${new Date(T0 + 19_500).toISOString()}; its agent is still telling how`);
    peer.agent = ready({ state: 'FAILED', running: false, error: 'engine was killed by SIGKILL', endedAtMs: T0 + 19_500 });
    await roundsOver(21_000, 21_000);
    expect(marks[1]?.fault).toMatchObject({ reason: 'rank 0 on node-a is FAILED: engine was killed by SIGKILL', sinceMs: T0 + 20_000 });
  });

  it("is broken on the second round rank 0's /health answers 503 (its engine core dead) and its agent is away", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-dp'), { agent: refused('agent 127.0.0.1:7470'), port: OPEN, health: { ok: false, accepted: true, cause: 'refused', why: 'answered HTTP 503' } });
    await roundsOver(20_000, 21_000);
    expect(marks).toHaveLength(1);
    expect(marks[0]?.fault?.reason).toMatch(/^rank 0 on node-a unreachable since .* \(agent 127\.0\.0\.1:7470: connect ECONNREFUSED; api 127\.0\.0\.1:8100\/health: answered HTTP 503\)$/);
  });

  it("is not broken by rank 0's agent restarting for 6 s while its API answers, gang_addr set", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-dp'), { agent: refused('agent'), port: refused('rpc'), health: OPEN });
    await roundsOver(20_000, 26_000);
    expect(marks).toEqual([]);
  });

  it("gives rank 0's agent the restart grace when nothing else shows it (no API port known): 6 s is no break, 10 s is one", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-dp', { leaderApiPort: 0 }), { agent: refused('agent'), port: refused('rpc'), health: OPEN });
    await roundsOver(20_000, 26_000);
    expect(marks).toEqual([]);
    await roundsOver(27_000, 32_000);
    expect(marks[0]?.fault?.reason).toMatch(/^rank 0 on node-a unreachable since /);
    expect(marks[0]?.atMs).toBe(T0 + 30_000);
  });
});

describe('a TP/PP gang (rank 0 holds its TCPStore once bound, late)', () => {
  it("is not broken while rank 0's store is not yet bound, 25 s after the start, its agent not asked (gang_addr unset)", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-tp', { gangAddr: false }), { agent: refused('x'), port: refused('rendezvous'), health: OPEN });
    await roundsOver(10_000, 30_000);
    expect(marks).toEqual([]);
  });

  it('is broken by a store never bound once rank 0 had its whole startup_timeout to bind it', async () => {
    const { marks, roundsOver } = watch(rank1('vllm-tp', { gangAddr: false }), { agent: refused('x'), port: refused('rendezvous 127.0.0.1:29500'), health: OPEN });
    await roundsOver(STARTUP_TIMEOUT_MS - 2_000, STARTUP_TIMEOUT_MS + 1_000);
    expect(marks.map((m) => m.atMs)).toEqual([T0 + STARTUP_TIMEOUT_MS + 1_000]);
  });

  it('is broken on the second round its store, once open, refuses and its agent refuses', async () => {
    const peer: Peer = { agent: refused('agent 127.0.0.1:7470'), port: OPEN, health: OPEN };
    const { marks, roundsOver } = watch(rank1('sglang'), peer);
    await roundsOver(20_000, 20_000);
    peer.port = refused('rendezvous 127.0.0.1:29500');
    await roundsOver(21_000, 22_000);
    expect(marks.map((m) => m.atMs)).toEqual([T0 + 22_000]);
  });

  it("is broken on the second round its whole node goes (agent and store refuse), the store seen open only while its agent answered", async () => {
    // Bench 15's "leader node SIGKILLed": a rank 0 whose agent always answered must not wait out the agent grace.
    const peer: Peer = { agent: ready(), port: OPEN, health: OPEN };
    const { marks, roundsOver } = watch(rank1('sglang'), peer);
    await roundsOver(20_000, 25_000);
    expect(marks).toEqual([]);
    Object.assign(peer, { agent: refused('agent 127.0.0.1:7470'), port: refused('rendezvous 127.0.0.1:29500') });
    await roundsOver(26_000, 27_000);
    expect(marks.map((m) => m.atMs)).toEqual([T0 + 27_000]);
  });

  it("gives an agent restart its grace while the store it was seen to hold still accepts", async () => {
    const peer: Peer = { agent: ready(), port: OPEN, health: OPEN };
    const { marks, roundsOver } = watch(rank1('sglang'), peer);
    await roundsOver(20_000, 25_000);
    peer.agent = refused('agent 127.0.0.1:7470');
    await roundsOver(26_000, 40_000);
    expect(marks).toEqual([]);
  });

  it("is not broken while rank 0's agent answers alive, whatever its port says", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-tp'), { agent: ready({ state: 'STARTING' }), port: refused('rendezvous'), health: OPEN });
    await roundsOver(10_000, 40_000);
    expect(marks).toEqual([]);
  });
});

describe('what is not evidence of a death', () => {
  it('our own TLS files unreadable: never a break, however long, and said once in the log', async () => {
    // Rank 0 watching its worker: no socket to ask, its agent alone (the true positive is the grace test above).
    const { marks, roundsOver, records } = watch(rank1('vllm-tp', { rank: 0 }), { agent: ready(), port: OPEN, health: OPEN }, { ask: undefined, tls: () => ({ error: "the agent's TLS files cannot be read: EACCES" }) });
    await roundsOver(20_000, 60_000);
    expect(marks).toEqual([]);
    expect(records.filter((r) => String(r.msg).includes('cannot be read'))).toHaveLength(1);
  });

  it("a peer's connection reset (its connection cap full, security review 4 F1) is not a refusal", async () => {
    const { marks, roundsOver } = watch(rank1('vllm-tp'), { agent: { ok: false, cause: 'unknown', why: 'agent x: connect ECONNRESET' }, port: refused('rendezvous'), health: OPEN });
    await roundsOver(10_000, 40_000);
    expect(marks).toEqual([]);
  });
});

describe('a silent node (no reset: powered off, partitioned, frozen)', () => {
  afterEach(() => vi.useRealTimers());

  /** The watch's own loop on fake timers; the peer goes silent just after a round; when is the break marked? */
  async function breakAfterSilence(engine: Engine, silentPort: boolean): Promise<number | undefined> {
    vi.useFakeTimers({ now: T0 + 60_000 });
    const peer: Peer = { agent: ready(), port: OPEN, health: OPEN };
    const { w, marks } = watch(rank1(engine), peer, { now: () => Date.now() });
    w.start();
    await vi.advanceTimersByTimeAsync(10);
    const wentAt = Date.now();
    peer.agent = 'silent';
    if (silentPort) [peer.port, peer.health] = ['silent', 'silent'];
    for (let i = 0; i < 200 && marks.length === 0; i++) await vi.advanceTimersByTimeAsync(50);
    w.close();
    return marks[0] ? marks[0].atMs - wentAt : undefined;
  }

  it('agent and rendezvous both silent: broken within 5 s', async () => {
    const after = await breakAfterSilence('sglang', true);
    expect(after).toBeDefined();
    expect(after).toBeLessThanOrEqual(5_000);
  });

  it('agent silent, no socket to ask (a DP rank 0 of an older control plane): broken within 5 s', async () => {
    const s = rank1('vllm-dp', { leaderApiPort: 0 });
    vi.useFakeTimers({ now: T0 + 60_000 });
    const peer: Peer = { agent: ready(), port: OPEN, health: OPEN };
    const { w, marks } = watch(s, peer, { now: () => Date.now() });
    w.start();
    await vi.advanceTimersByTimeAsync(10);
    const wentAt = Date.now();
    peer.agent = 'silent';
    for (let i = 0; i < 200 && marks.length === 0; i++) await vi.advanceTimersByTimeAsync(50);
    w.close();
    expect(marks).toHaveLength(1);
    expect((marks[0]?.atMs ?? Number.POSITIVE_INFINITY) - wentAt).toBeLessThanOrEqual(5_000);
    expect(marks[0]?.fault?.reason).toMatch(/\(agent 127\.0\.0\.1:7470: no answer within \d+ ms\)$/);
  });

  it('agent silent (SIGSTOPped) while its engine answers: not broken', async () => {
    const after = await breakAfterSilence('sglang', false);
    expect(after).toBeUndefined();
  });
});
