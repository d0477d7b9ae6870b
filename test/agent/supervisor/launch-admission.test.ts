import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ShardState, StartShardSchema, type StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import {
  DEFAULT_MAX_CONCURRENT_LAUNCHES,
  LaunchAdmission,
  MAX_PENDING_LAUNCHES,
  RepeatedStartError,
} from '../../../src/agent/supervisor/launch-admission.js';
import type { ShardRunner } from '../../../src/agent/supervisor/shard/shard-runner.js';
import { deferred } from '../../helpers/deferred.js';
import { sglangDpAttention, shardBoundPorts } from '../../../src/agent/engines/shard-bound-ports.js';

function spec(shardId: string, gpuIndices: number[], httpPort = 0): StartShard {
  return create(StartShardSchema, { shardId, replicaId: `rep-${shardId}`, gpuIndices, httpPort });
}

/** The four fields LaunchAdmission reads of a runner. */
function runner(s: StartShard, currentState: ShardState, running: boolean): ShardRunner {
  return { shardId: s.shardId, spec: s, currentState, running } as unknown as ShardRunner;
}

function admission(runners: ShardRunner[] = [], opts: { max?: number; pending?: number; closed?: AbortSignal } = {}) {
  const table = new Map(runners.map((r) => [r.shardId as string, r]));
  return new LaunchAdmission({
    runners: table,
    closed: opts.closed ?? new AbortController().signal,
    maxConcurrentLaunches: opts.max,
    maxPendingLaunches: opts.pending,
  });
}

/** A launch that stays in progress until the test settles it. */
const pendingLaunch = () => deferred<ShardRunner>();

function claimErr(a: LaunchAdmission, s: StartShard): LlmgwError {
  try {
    a.claim(s, () => pendingLaunch().promise);
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    return err as LlmgwError;
  }
  throw new Error(`claim of ${s.shardId} was not refused`);
}

const flush = () => new Promise<void>((r) => setImmediate(r));

describe('LaunchAdmission defaults', () => {
  it('bounds launches at 8 at once and 64 in progress', () => {
    expect(DEFAULT_MAX_CONCURRENT_LAUNCHES).toBe(8);
    expect(MAX_PENDING_LAUNCHES).toBe(64);
  });
});

describe('LaunchAdmission.claim', () => {
  it('refuses a GPU a live runner holds, naming the holder', () => {
    const a = admission([runner(spec('held', [2, 3]), ShardState.READY, true)]);
    const err = claimErr(a, spec('new', [1, 3]));
    expect(err.kind).toBe('failure');
    expect(err.message).toBe('GPU 3 is held by shard held; stop it first or place this shard elsewhere');
    expect(a.isClaimed('new')).toBe(false);
    expect(a.pending('new')).toBeUndefined();
  });

  it('counts a FAILED runner whose engine still runs as holding its GPUs', () => {
    const a = admission([runner(spec('stuck', [0]), ShardState.FAILED, true)]);
    expect(claimErr(a, spec('new', [0])).message).toContain('GPU 0 is held by shard stuck');
  });

  it('lets a terminal runner whose engine is gone release its GPUs and port', () => {
    const a = admission([runner(spec('gone', [0], 18000), ShardState.EXITED, false)]);
    expect(a.reservations().gpus.size).toBe(0);
    expect(a.reservations().ports.size).toBe(0);
    expect(() => a.claim(spec('new', [0], 18000), () => pendingLaunch().promise)).not.toThrow();
    expect(a.isClaimed('new')).toBe(true);
  });

  it('counts a non-terminal runner as holding even when not marked running', () => {
    const a = admission([runner(spec('starting', [5]), ShardState.STARTING, false)]);
    expect(claimErr(a, spec('new', [5])).message).toContain('held by shard starting');
  });

  it('refuses a GPU another launch in progress has claimed, before that launch has a runner', () => {
    const a = admission();
    a.claim(spec('first', [4]), () => pendingLaunch().promise);
    expect(claimErr(a, spec('second', [4])).message).toBe('GPU 4 is held by shard first; stop it first or place this shard elsewhere');
  });

  it('refuses an http_port held, naming the holder', () => {
    const a = admission([runner(spec('web', [0], 18000), ShardState.READY, true)]);
    const err = claimErr(a, spec('new', [1], 18000));
    expect(err.message).toBe('http_port 18000 is already in use on this node by shard web; use another port');
  });

  it('does not treat port 0 (no HTTP) as a port held', () => {
    const a = admission([runner(spec('worker', [0], 0), ShardState.READY, true)]);
    expect(a.reservations().ports.size).toBe(0);
    expect(() => a.claim(spec('worker2', [1], 0), () => pendingLaunch().promise)).not.toThrow();
  });

  it('does not count the shard against itself (a restart of the same id)', () => {
    const s = spec('same', [0], 18000);
    const a = admission([runner(s, ShardState.READY, true)]);
    expect(() => a.claim(spec('same', [0], 18000), () => pendingLaunch().promise)).not.toThrow();
  });

  it('refuses beyond maxPendingLaunches, saying how many are in progress', () => {
    const a = admission([], { pending: 2 });
    a.claim(spec('a', [0]), () => pendingLaunch().promise);
    a.claim(spec('b', [1]), () => pendingLaunch().promise);
    let called = false;
    try {
      a.claim(spec('c', [2]), () => {
        called = true;
        return pendingLaunch().promise;
      });
      expect.unreachable('a third start was admitted');
    } catch (err) {
      expect((err as Error).message).toBe('2 shard starts are in progress already, the most this agent takes at once; retry once some have settled');
    }
    expect(called).toBe(false);
    expect(a.isClaimed('c')).toBe(false);
  });

  it('starts the launch, and settled resolves to its runner, or undefined when it was refused', async () => {
    const a = admission();
    const ok = pendingLaunch();
    const s = spec('ok', [0]);
    const r = runner(s, ShardState.STARTING, true);
    const okClaim = a.claim(s, () => ok.promise);
    expect(a.pending('ok')).toBe(okClaim.settled);
    ok.resolve(r);
    await expect(okClaim.launch).resolves.toBe(r);
    await expect(okClaim.settled).resolves.toBe(r);

    const bad = pendingLaunch();
    const badClaim = a.claim(spec('bad', [1]), () => bad.promise);
    bad.reject(new Error('no such executable'));
    await expect(badClaim.launch).rejects.toThrow('no such executable');
    await expect(badClaim.settled).resolves.toBeUndefined();
  });
});

describe('LaunchAdmission.release', () => {
  it('ends the matching claim, freeing its GPUs and port', () => {
    const a = admission();
    const { settled } = a.claim(spec('s1', [0], 18000), () => pendingLaunch().promise);
    a.release('s1', settled);
    expect(a.isClaimed('s1')).toBe(false);
    expect(a.pending('s1')).toBeUndefined();
    expect(a.reservations().gpus.size).toBe(0);
    expect(() => a.claim(spec('s2', [0], 18000), () => pendingLaunch().promise)).not.toThrow();
  });

  it('leaves a newer claim of the same id alone when an older launch releases', () => {
    const a = admission();
    const older = a.claim(spec('s1', [0]), () => pendingLaunch().promise);
    const newer = a.claim(spec('s1', [1]), () => pendingLaunch().promise);
    a.release('s1', older.settled);
    expect(a.isClaimed('s1')).toBe(true);
    expect(a.pending('s1')).toBe(newer.settled);
    expect(a.reservations().gpus.get(1)).toBe('s1');
    a.release('s1', newer.settled);
    expect(a.isClaimed('s1')).toBe(false);
  });

  it('does nothing for an id never claimed', () => {
    const a = admission();
    a.claim(spec('s1', [0]), () => pendingLaunch().promise);
    a.release('other', Promise.resolve(undefined));
    expect(a.isClaimed('s1')).toBe(true);
  });
});

describe('LaunchAdmission.reservations', () => {
  it('maps each GPU and port to its holder, runners and claims alike', () => {
    const a = admission([runner(spec('run', [0, 1], 18000), ShardState.READY, true)]);
    a.claim(spec('claim', [2], 18001), () => pendingLaunch().promise);
    const r = a.reservations();
    expect([...r.gpus.entries()].sort()).toEqual([
      [0, 'run'],
      [1, 'run'],
      [2, 'claim'],
    ]);
    expect([...r.ports.entries()].sort()).toEqual([
      [18000, 'run'],
      [18001, 'claim'],
    ]);
  });

  it('excludes the given id, both its runner and its claim', () => {
    const a = admission([runner(spec('run', [0], 18000), ShardState.READY, true)]);
    a.claim(spec('claim', [2], 18001), () => pendingLaunch().promise);
    expect([...a.reservations('run').gpus.keys()]).toEqual([2]);
    expect([...a.reservations('run').ports.keys()]).toEqual([18001]);
    expect([...a.reservations('claim').gpus.keys()]).toEqual([0]);
    expect([...a.reservations('claim').ports.keys()]).toEqual([18000]);
  });
});

describe('LaunchAdmission.takeSlot', () => {
  it('lets maxConcurrentLaunches through at once and makes the next wait', async () => {
    const a = admission([], { max: 2 });
    await a.takeSlot();
    await a.takeSlot();
    let third = false;
    const p = a.takeSlot().then(() => {
      third = true;
    });
    await flush();
    expect(third).toBe(false);
    a.releaseSlot();
    await p;
    expect(third).toBe(true);
  });

  it('hands freed slots to waiters first come, first served', async () => {
    const a = admission([], { max: 1 });
    await a.takeSlot();
    const order: string[] = [];
    const waiters = ['w1', 'w2', 'w3'].map((name) => a.takeSlot().then(() => order.push(name)));
    await flush();
    expect(order).toEqual([]);
    for (let i = 0; i < 3; i++) {
      a.releaseSlot();
      await flush();
      expect(order).toHaveLength(i + 1);
    }
    await Promise.all(waiters);
    expect(order).toEqual(['w1', 'w2', 'w3']);
  });

  it('gives a slot given back to the launch waiting for it, not to a start arriving in the same moment', async () => {
    const a = admission([], { max: 1 });
    await a.takeSlot();
    const order: string[] = [];
    const waiter = a.takeSlot().then(() => order.push('waiter'));
    await flush();
    a.releaseSlot();
    const late = a.takeSlot().then(() => order.push('late'));
    await flush();
    a.releaseSlot();
    await Promise.all([waiter, late]);
    expect(order).toEqual(['waiter', 'late']);
  });

  it('makes every waiter throw, taking nothing, once closed and woken', async () => {
    const closer = new AbortController();
    const a = admission([], { max: 1, closed: closer.signal });
    await a.takeSlot();
    const waiting = [a.takeSlot(), a.takeSlot()];
    for (const w of waiting) w.catch(() => {});
    closer.abort();
    a.wakeAll();
    for (const w of waiting) await expect(w).rejects.toThrow('the supervisor is closed');
    // Nothing was taken by the waiters: the one slot given back is free again.
    a.releaseSlot();
    await expect(a.takeSlot()).resolves.toBeUndefined();
  });

  it('keeps waiters waiting when woken while not closed', async () => {
    const a = admission([], { max: 1 });
    await a.takeSlot();
    let done = false;
    const p = a.takeSlot().then(() => {
      done = true;
    });
    a.wakeAll();
    await flush();
    expect(done).toBe(false);
    a.releaseSlot();
    await p;
    expect(done).toBe(true);
  });
});

describe('RepeatedStartError', () => {
  it('carries the shard id and says the start it joined was refused', () => {
    const err = new RepeatedStartError('s7');
    expect(err).toBeInstanceOf(LlmgwError);
    expect(err.shardId).toBe('s7');
    expect(err.kind).toBe('failure');
    expect(err.exitCode).toBe(1);
    expect(err.message).toBe('shard s7: the start this repeat joined was refused');
  });
});

/*
 * Review engine-fidelity-3, E16: SGLang with DP attention binds, beside its
 * http_port, the dist-init port and six ports after it, and the port
 * handshake 13 after (src/agent/engines/shard-bound-ports.ts cites where).
 * Two such shards on one node whose ports are that close collide at start.
 */
describe('LaunchAdmission with the ports an engine derives (SGLang DP attention)', () => {
  const gang = (shardId: string, leaderPort: number, httpPort: number, args: string[] = ['--enable-dp-attention', '--dp-size', '2']) =>
    create(StartShardSchema, {
      shardId,
      replicaId: `rep-${shardId}`,
      gpuIndices: [Number(shardId.replace(/\D/g, '')) % 8],
      httpPort,
      nnodes: 2,
      rank: 0,
      leaderAddr: '10.0.0.1',
      leaderPort,
      profile: { engine: 'sglang', model: 'm', args },
    });
  const withPorts = (runners: ShardRunner[] = []) =>
    new LaunchAdmission({ runners: new Map(runners.map((r) => [r.shardId, r])), closed: new AbortController().signal, boundPorts: (s) => shardBoundPorts(s) });

  it('holds leader_port, the six after it and the handshake 13 after, on rank 0; the block without the handshake on the other ranks', () => {
    expect(shardBoundPorts(gang('g1', 29500, 8001)).map((p) => p.port)).toEqual([8001, 29500, 29501, 29502, 29503, 29504, 29505, 29506, 29513]);
    expect(shardBoundPorts(create(StartShardSchema, { ...gang('g1', 29500, 0), rank: 1 })).map((p) => p.port)).toEqual([29500, 29501, 29502, 29503, 29504, 29505, 29506]);
    // Past 65535 SGLang counts down from leader_port - 7 (server_args.py:9917-9920).
    expect(shardBoundPorts(gang('g1', 65533, 8001)).map((p) => p.port).slice(1, 8)).toEqual([65533, 65526, 65527, 65528, 65529, 65530, 65531]);
  });

  it('refuses a second gang whose leader_port is within the first one\'s block, naming both, at once', () => {
    const a = withPorts([runner(gang('g1', 29500, 8001), ShardState.READY, true)]);
    expect(claimErr(a, gang('g2', 29503, 8002)).message).toBe(
      "leader_port 29503 is already in use on this node by shard g1 (port 29503, which SGLang's DP attention derives from leader_port 29500); give the two shards ports at least 14 apart",
    );
    // Either way round: a gang below whose block covers the first's leader_port.
    expect(claimErr(a, gang('g3', 29495, 8003)).message).toBe(
      "port 29500, which SGLang's DP attention derives from leader_port 29495, is already in use on this node by shard g1 (leader_port 29500); give the two shards ports at least 14 apart",
    );
  });

  it("refuses any shard's http_port inside the block", () => {
    const a = withPorts([runner(gang('g1', 29500, 8001), ShardState.READY, true)]);
    expect(claimErr(a, spec('s9', [5], 29513)).message).toBe(
      "http_port 29513 is already in use on this node by shard g1 (port 29513, which SGLang's DP attention derives from leader_port 29500); give the two shards ports at least 14 apart",
    );
  });

  it('takes two gangs whose ports are far apart, and two without DP attention however close (as before)', () => {
    const far = withPorts([runner(gang('g1', 29500, 8001), ShardState.READY, true)]);
    expect(() => far.claim(gang('g2', 29520, 8002), () => pendingLaunch().promise)).not.toThrow();
    const plain = withPorts([runner(gang('g1', 29500, 8001, ['--dp-size', '2']), ShardState.READY, true)]);
    expect(() => plain.claim(gang('g2', 29501, 8002, ['--dp-size', '2']), () => pendingLaunch().promise)).not.toThrow();
  });

  it('on one node, derives the block from http_port + 233: two shards on adjacent http ports collide', () => {
    const one = (id: string, http: number) => create(StartShardSchema, { ...gang(id, 0, http), nnodes: 1, leaderAddr: '', leaderPort: 0 });
    expect(shardBoundPorts(one('s1', 8000)).map((p) => p.port)).toEqual([8000, 8233, 8234, 8235, 8236, 8237, 8238, 8239, 8013]);
    const a = withPorts([runner(one('s1', 8000), ShardState.READY, true)]);
    expect(claimErr(a, one('s2', 8001)).message).toBe(
      "port 8234, which SGLang's DP attention derives from http_port 8001, is already in use on this node by shard s1 (port 8234, which SGLang's DP attention derives from http_port 8000); give the two shards ports at least 14 apart",
    );
  });

  it('sees DP attention in the operator\'s extra_args and through --dwdp-size above 1', () => {
    const plain = gang('g1', 29500, 8001, []);
    expect(shardBoundPorts(plain)).toHaveLength(1);
    expect(shardBoundPorts(plain, ['--enable-dp-attention'])).toHaveLength(9);
    expect(sglangDpAttention(['--dwdp-size', '2'])).toBe(true);
    expect(sglangDpAttention(['--dwdp-size=4'])).toBe(true);
    expect(sglangDpAttention(['--dwdp-size', '1', '--dp-size', '2'])).toBe(false);
    // Another engine's args are not SGLang's.
    const vllm = gang('g1', 29500, 8001);
    if (vllm.profile) vllm.profile.engine = 'vllm';
    expect(shardBoundPorts(vllm)).toHaveLength(1);
  });
});
