import {
  isServing,
  isTransitionAllowed,
  newShardLife,
  nextShard,
  registerState,
  type ShardChange,
  type ShardChangeKind,
  type ShardLife,
  type ShardNext,
} from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { isTerminal, REPORTED_SHARD_STATES, stateName } from '../../../../src/lib/shard-states.js';
import { describe, expect, it } from 'vitest';

describe('shard transitions', () => {
  it.each([
    [S.UNSPECIFIED, S.STARTING],
    [S.STARTING, S.READY],
    [S.STARTING, S.FAILED],
    [S.READY, S.UNHEALTHY],
    [S.UNHEALTHY, S.READY],
    [S.READY, S.DRAINING],
    [S.DRAINING, S.STOPPING],
    // ctl drain --cancel.
    [S.DRAINING, S.READY],
    // An adopted engine whose drain outlived the previous agent.
    [S.STARTING, S.DRAINING],
    [S.STOPPING, S.STOPPED],
    [S.READY, S.EXITED],
    [S.FAILED, S.STARTING],
  ])('allows %s → %s', (from, to) => {
    expect(isTransitionAllowed(from, to)).toBe(true);
  });

  it.each([
    // An engine that never served has not "exited cleanly".
    [S.STARTING, S.EXITED],
    [S.STOPPED, S.READY],
    [S.STOPPING, S.FAILED],
    // Health is not judged while draining; a cancelled drain goes through READY.
    [S.DRAINING, S.UNHEALTHY],
    [S.FAILED, S.READY],
  ])('refuses %s → %s', (from, to) => {
    expect(isTransitionAllowed(from, to)).toBe(false);
  });

  it('calls only STOPPED, FAILED and EXITED terminal', () => {
    const terminal = Object.values(S).filter((v): v is S => typeof v === 'number' && isTerminal(v));
    expect(terminal.sort()).toEqual([S.STOPPED, S.FAILED, S.EXITED].sort());
  });
});

const well = { healthy: true, cause: undefined, why: 'answers /health' } as const;
const sick = { healthy: false, cause: undefined, why: 'probe timed out' } as const;

/** A shard in `state` with the facts that state carries: a drain for DRAINING, a level 1 sleep for SLEEPING. */
const lifeIn = (state: S, facts: Partial<ShardLife> = {}): ShardLife => ({
  ...newShardLife({ state, drain: state === S.DRAINING, sleepLevel: state === S.SLEEPING ? 1 : 0 }),
  ...facts,
});

/** The next life, failing the test on a refusal. */
function applied(life: ShardLife, ...changes: ShardChange[]): ShardLife {
  let l = life;
  for (const c of changes) {
    const next = nextShard(l, c);
    if ('refused' in next) throw new Error(`${c.kind} refused: ${next.refused}`);
    l = next.life;
  }
  return l;
}

/** One example of every change the machine takes; `satisfies` makes a new kind fail tsc until it is here. */
const EXAMPLES = {
  begin: { kind: 'begin', why: 'launched' },
  squatted: { kind: 'squatted', squatter: 'pid 9 (uid 65533) holds the port' },
  answered: { kind: 'answered', why: 'answers /health' },
  watched: { kind: 'watched' },
  'not-ready': { kind: 'not-ready', error: 'not ready in 10m', lastOutput: ['loading'] },
  exited: { kind: 'exited', exit: { code: 1, signal: null } },
  died: { kind: 'died', info: { known: true, code: 1, signal: null }, details: [], lastOutput: ['Traceback'] },
  probe: { kind: 'probe', verdict: sick },
  'answer-after-unasked-sleep': { kind: 'answer-after-unasked-sleep', verdict: well },
  'gpu-fault': { kind: 'gpu-fault', reason: 'GPU 0: Xid 79' },
  'gpu-sound': { kind: 'gpu-sound' },
  'gang-fault': { kind: 'gang-fault', fault: { rank: 0, nodeId: 'node-a', shardId: 'r-g1-0', reason: 'rank 0 on node-a is FAILED: engine killed by SIGKILL', sinceMs: 1, stalled: false } },
  'gang-whole': { kind: 'gang-whole' },
  'known-answer': { kind: 'known-answer', text: ' 9, 10, 11' },
  drain: { kind: 'drain' },
  'cancel-drain': { kind: 'cancel-drain' },
  sleep: { kind: 'sleep', level: 1, awakeMib: 70000, why: 'sleep level 1 requested' },
  released: { kind: 'released' },
  resumed: { kind: 'resumed' },
  'sleep-failed': { kind: 'sleep-failed', error: 'sleep failed: POST /sleep answered 500', lostWeights: false },
  wake: { kind: 'wake' },
  woken: { kind: 'woken', why: 'woken: answers /health' },
  'wake-failed': { kind: 'wake-failed', error: 'wake failed: POST /wake_up answered 500' },
  'woke-without-weights': { kind: 'woke-without-weights', error: 'woke without its weights: it answers "!!!!"', lastOutput: [] },
  stop: { kind: 'stop', why: 'stop requested (grace 30s)' },
  stopped: { kind: 'stopped', why: 'terminated' },
  'found-asleep': { kind: 'found-asleep', level: 1, why: 'the engine sleeps (level 1) though its state file recorded it awake' },
  'found-awake': { kind: 'found-awake', why: 'the engine is awake though its state file recorded it asleep at level 2' },
} as const satisfies { [K in ShardChangeKind]: Extract<ShardChange, { kind: K }> };

type Outcome = string; // a state's name (a transition), '=' (its state stays), 'refused', or 'bug' (throws)
const outcome = (life: ShardLife, change: ShardChange): Outcome => {
  let next: ShardNext;
  try {
    next = nextShard(life, change);
  } catch {
    return 'bug';
  }
  if ('refused' in next) return 'refused';
  return next.life.state === life.state ? '=' : stateName(next.life.state);
};

/**
 * The specification: for every change, what it does in each state (given as
 * the outcome in most states, then the states that differ). '=' keeps the
 * state (facts may change: a squatter, an error, a fault, a memory).
 */
const TABLE: { [K in ShardChangeKind]: [Outcome, Partial<Record<string, Outcome>>] } = {
  // A start, or a relaunch of an ended shard under its id.
  begin: ['bug', { UNSPECIFIED: 'STARTING', STOPPED: 'STARTING', FAILED: 'STARTING', EXITED: 'STARTING' }],
  // Facts only: who holds the port of a starting engine.
  squatted: ['=', {}],
  // Only a readiness wait of a STARTING shard ends in an answer.
  answered: ['bug', { STARTING: 'READY' }],
  // A fault raised while loading counts once the shard serves (none here).
  watched: ['=', {}],
  'not-ready': ['=', { STARTING: 'FAILED' }],
  // Facts only: the leader is gone; what it means is 'died'.
  exited: ['=', {}],
  // A crash fails what was starting, serving or asleep; a stop reports its own end; an end is reported once.
  died: ['=', { STARTING: 'FAILED', READY: 'FAILED', UNHEALTHY: 'FAILED', DRAINING: 'FAILED', SLEEPING: 'FAILED' }],
  // Health is judged only of READY and UNHEALTHY shards: never while draining, asleep, starting or stopping.
  probe: ['=', { READY: 'UNHEALTHY' }],
  'answer-after-unasked-sleep': ['=', { UNHEALTHY: 'READY' }],
  'gpu-fault': ['=', { READY: 'UNHEALTHY' }],
  'gpu-sound': ['=', {}],
  // A rank still loading whose gang broke never serves; one serving is UNHEALTHY, the rest carry the break in their report.
  'gang-fault': ['=', { STARTING: 'FAILED', READY: 'UNHEALTHY' }],
  'gang-whole': ['=', {}],
  // Only a READY engine's answer is worth recording.
  'known-answer': ['refused', { READY: '=' }],
  drain: ['refused', { READY: 'DRAINING', UNHEALTHY: 'DRAINING', DRAINING: '=' }],
  'cancel-drain': ['refused', { DRAINING: 'READY' }],
  sleep: ['refused', { READY: 'SLEEPING' }],
  released: ['=', {}],
  resumed: ['=', {}],
  'sleep-failed': ['=', { SLEEPING: 'READY' }],
  wake: ['refused', { SLEEPING: '=' }],
  woken: ['refused', { SLEEPING: 'READY' }],
  'wake-failed': ['=', {}],
  'woke-without-weights': ['refused', { SLEEPING: 'FAILED' }],
  stop: ['=', { UNSPECIFIED: 'bug', STARTING: 'STOPPING', READY: 'STOPPING', UNHEALTHY: 'STOPPING', DRAINING: 'STOPPING', SLEEPING: 'STOPPING' }],
  stopped: ['=', { STOPPING: 'STOPPED' }],
  // Facts only, and only while an adoption settles: what the engine itself says of its sleep (adopted-sleep.ts).
  'found-asleep': ['=', {}],
  'found-awake': ['=', {}],
};

const ALL_STATES = [S.UNSPECIFIED, ...REPORTED_SHARD_STATES];

describe('the shard machine: every state × every change', () => {
  it.each(Object.keys(EXAMPLES) as ShardChangeKind[])('%s', (kind) => {
    const [otherwise, except] = TABLE[kind];
    const got = Object.fromEntries(ALL_STATES.map((s) => [stateName(s), outcome(lifeIn(s), EXAMPLES[kind])]));
    const want = Object.fromEntries(ALL_STATES.map((s) => [stateName(s), except[stateName(s)] ?? otherwise]));
    expect(got).toEqual(want);
  });
});

describe('the facts each change sets', () => {
  it('takes what an adopted engine says of its sleep over its record while it settles, and settles it SLEEPING or READY by it; never after', () => {
    const recordedAwake = newShardLife({ state: S.STARTING });
    const foundAsleep = applied(recordedAwake, { kind: 'found-asleep', level: 1, why: 'asleep' });
    expect(foundAsleep.sleep).toEqual({ level: 1, awakeMib: 0, memory: 'released' });
    expect(applied(foundAsleep, EXAMPLES.answered).state).toBe(S.SLEEPING);
    const recordedAsleep = newShardLife({ state: S.STARTING, sleepLevel: 2, awakeMib: 70000 });
    const foundAwake = applied(recordedAsleep, { kind: 'found-awake', why: 'awake' });
    expect(foundAwake.sleep).toBeUndefined();
    expect(applied(foundAwake, EXAMPLES.answered).state).toBe(S.READY);
    // Recorded asleep and asleep: the record's level and memory figure stand.
    expect(applied(recordedAsleep, { kind: 'found-asleep', level: 1, why: 'asleep' }).sleep).toEqual({ level: 1, awakeMib: 70000, memory: 'released' });
    // A READY or SLEEPING shard's sleep is the agent's own: the finding changes nothing there.
    expect(applied(lifeIn(S.READY), { kind: 'found-asleep', level: 2, why: 'asleep' }).sleep).toBeUndefined();
    expect(applied(lifeIn(S.SLEEPING), { kind: 'found-awake', why: 'awake' }).sleep).toBeDefined();
  });

  it('holds a rank whose gang broke UNHEALTHY, whatever its own probe says, until the gang is whole again; a stall of a starting gang only notes it', () => {
    const broken = applied(lifeIn(S.READY), EXAMPLES['gang-fault']);
    expect(broken).toMatchObject({ state: S.UNHEALTHY, error: 'gang broken: rank 0 on node-a is FAILED: engine killed by SIGKILL' });
    expect(applied(broken, { kind: 'probe', verdict: well }).state).toBe(S.UNHEALTHY);
    // A GPU fault cleared meanwhile leaves the gang's error, not none.
    const both = applied(broken, EXAMPLES['gpu-fault'], EXAMPLES['gpu-sound']);
    expect(both).toMatchObject({ state: S.UNHEALTHY, error: 'gang broken: rank 0 on node-a is FAILED: engine killed by SIGKILL' });
    expect(applied(broken, EXAMPLES['gang-whole'])).toMatchObject({ state: S.READY, error: '' });
    const stall = { ...EXAMPLES['gang-fault'].fault, stalled: true, reason: 'rank 0 on node-a stalled' };
    expect(applied(lifeIn(S.STARTING), { kind: 'gang-fault', fault: stall })).toMatchObject({ state: S.STARTING, health: { gang: stall } });
    expect(applied(lifeIn(S.READY), { kind: 'gang-fault', fault: stall }).error).toBe('gang stalled: rank 0 on node-a stalled');
    // Said once: the same fault again changes nothing.
    expect(nextShard(broken, EXAMPLES['gang-fault'])).toEqual({ life: broken, why: 'gang fault already known' });
  });

  it('brings an adopted shard whose drain or sleep outlived the agent back DRAINING or SLEEPING, never READY', () => {
    expect(applied(newShardLife({ drain: true }), EXAMPLES.begin, EXAMPLES.answered).state).toBe(S.DRAINING);
    const asleep = applied(newShardLife({ sleepLevel: 2, awakeMib: 500 }), EXAMPLES.begin, EXAMPLES.answered);
    expect(asleep.state).toBe(S.SLEEPING);
    expect(asleep.sleep).toEqual({ level: 2, awakeMib: 500, memory: 'released' });
    expect(registerState({ state: S.STARTING, drainRequested: true })).toBe(S.DRAINING);
    expect(registerState({ state: S.STARTING, sleepLevel: 1 })).toBe(S.SLEEPING);
    expect(registerState({ state: S.READY, sleepLevel: 1 })).toBe(S.READY);
  });

  it('names the squatter of a starting shard as its error until it is gone, and lets a dead one\'s death say it', () => {
    const squatted = applied(lifeIn(S.STARTING), EXAMPLES.squatted);
    expect(squatted).toMatchObject({ squatter: 'pid 9 (uid 65533) holds the port', error: 'pid 9 (uid 65533) holds the port' });
    expect(applied(squatted, { kind: 'squatted', squatter: undefined }).error).toBe('');
    const dead = applied(lifeIn(S.STARTING), EXAMPLES.exited);
    expect(nextShard(dead, EXAMPLES.squatted)).toEqual({ life: dead, why: 'not starting' });
  });

  it('says why a death failed the shard, with the exit status and last words', () => {
    const died = applied(lifeIn(S.STARTING), { kind: 'exited', exit: { code: null, signal: 'SIGKILL' } }, {
      kind: 'died',
      info: { known: true, code: null, signal: 'SIGKILL' },
      details: ['pid 9 holds the port'],
      lastOutput: ['OSError: [Errno 98]'],
    });
    expect(died).toMatchObject({ state: S.FAILED, dead: true, exitCode: 137, signal: 'SIGKILL', error: 'engine was killed by SIGKILL while starting: pid 9 holds the port', lastOutput: ['OSError: [Errno 98]'] });
    // A clean exit of a serving engine is no failure.
    expect(applied(lifeIn(S.READY), { kind: 'died', info: { known: true, code: 0, signal: null }, details: [], lastOutput: [] }).state).toBe(S.EXITED);
  });

  it('makes a READY shard UNHEALTHY on a failed probe and READY again when it answers', () => {
    const unhealthy = applied(lifeIn(S.READY), { kind: 'probe', verdict: sick });
    expect(unhealthy).toMatchObject({ state: S.UNHEALTHY, error: 'probe timed out' });
    expect(applied(unhealthy, { kind: 'probe', verdict: well })).toMatchObject({ state: S.READY, error: '' });
    const ready = lifeIn(S.READY);
    expect(applied(ready, { kind: 'probe', verdict: well }).state).toBe(S.READY);
  });

  it('keeps a shard on a faulted GPU UNHEALTHY although its engine answers, until the fault clears', () => {
    const faulted = applied(lifeIn(S.READY), { kind: 'gpu-fault', reason: 'GPU 3: Xid 79' });
    expect(faulted).toMatchObject({ state: S.UNHEALTHY, error: 'GPU 3: Xid 79' });
    expect(applied(faulted, { kind: 'probe', verdict: well })).toMatchObject({ state: S.UNHEALTHY, error: 'GPU 3: Xid 79' });
    expect(nextShard(faulted, { kind: 'gpu-fault', reason: 'GPU 3: Xid 79' }), 'the same fault again changes nothing').toEqual({ life: faulted, why: 'fault already known' });
    expect(nextShard(faulted, { kind: 'gpu-sound' })).toMatchObject({ life: { state: S.READY, error: '' }, why: 'GPU fault cleared (GPU 3: Xid 79)' });
  });

  it('holds a fault raised while loading until the shard serves', () => {
    const loading = applied(lifeIn(S.STARTING), { kind: 'gpu-fault', reason: 'GPU 1: double-bit ECC' });
    expect(loading.state).toBe(S.STARTING);
    expect(applied(loading, EXAMPLES.answered, EXAMPLES.watched)).toMatchObject({ state: S.UNHEALTHY, error: 'GPU 1: double-bit ECC' });
  });

  it('leaves a cleared fault UNHEALTHY while the probe still fails', () => {
    const both = applied(lifeIn(S.READY), { kind: 'gpu-fault', reason: 'GPU 2: Xid 48' }, { kind: 'probe', verdict: sick });
    expect(nextShard(both, { kind: 'gpu-sound' })).toMatchObject({ life: { state: S.UNHEALTHY, error: '' }, why: 'GPU fault cleared (GPU 2: Xid 48)' });
  });

  it('clears only the fault its raiser names: a known-answer check does not clear a GPU fault raised since', () => {
    const gpu = applied(lifeIn(S.READY), { kind: 'gpu-fault', reason: 'GPU 0: Xid 79' });
    expect(nextShard(gpu, { kind: 'gpu-sound', only: 'known answer changed: x' })).toEqual({ life: gpu, why: 'no such fault' });
  });

  it('makes a repeated drain a no-op, refuses one in the wrong state naming it, and cancels back to READY', () => {
    const draining = applied(lifeIn(S.READY), EXAMPLES.drain);
    expect(draining).toMatchObject({ state: S.DRAINING, drain: true });
    expect(nextShard(draining, EXAMPLES.drain)).toEqual({ life: draining, why: 'already draining' });
    expect(nextShard(lifeIn(S.STARTING), EXAMPLES.drain)).toEqual({ refused: 'is STARTING: only a READY or UNHEALTHY shard can be drained' });
    expect(applied(draining, EXAMPLES['cancel-drain'])).toMatchObject({ state: S.READY, drain: false, error: '' });
    expect(nextShard(lifeIn(S.READY), EXAMPLES['cancel-drain'])).toEqual({ refused: 'is READY: only a DRAINING shard can have its drain cancelled' });
  });

  it('carries a sleep\'s memory: held when asked, released by the engine, resumed by a wake, gone once woken', () => {
    const asked = applied(lifeIn(S.READY), EXAMPLES.sleep);
    expect(asked).toMatchObject({ state: S.SLEEPING, sleep: { level: 1, awakeMib: 70000, memory: 'held' } });
    const released = applied(asked, EXAMPLES.released);
    expect(released.sleep?.memory).toBe('released');
    expect(applied(released, EXAMPLES.resumed).sleep?.memory).toBe('resumed');
    expect(applied(released, EXAMPLES.resumed, EXAMPLES.woken)).toMatchObject({ state: S.READY, error: '', sleep: undefined });
    expect(nextShard(lifeIn(S.UNHEALTHY), EXAMPLES.sleep)).toEqual({ refused: 'is UNHEALTHY; only a READY shard can sleep' });
  });

  it('undoes a failed sleep to READY with its reason, or FAILED when the engine woke without its weights', () => {
    const asked = applied(lifeIn(S.READY), EXAMPLES.sleep, EXAMPLES.released);
    expect(applied(asked, EXAMPLES['sleep-failed'])).toMatchObject({ state: S.READY, error: 'sleep failed: POST /sleep answered 500', sleep: undefined });
    expect(applied(asked, { kind: 'sleep-failed', error: 'sleep failed: x; woke without its weights: y', lostWeights: true })).toMatchObject({ state: S.FAILED, sleep: undefined });
  });

  it('keeps a shard whose wake failed SLEEPING with the reason, and fails one woken without its weights', () => {
    expect(applied(lifeIn(S.SLEEPING), EXAMPLES['wake-failed'])).toMatchObject({ state: S.SLEEPING, error: 'wake failed: POST /wake_up answered 500' });
    expect(applied(lifeIn(S.SLEEPING), EXAMPLES['woke-without-weights'])).toMatchObject({ state: S.FAILED, error: 'woke without its weights: it answers "!!!!"' });
    // A wake that raced a stop: refused, in the words a ctl user reads.
    expect(nextShard(lifeIn(S.STOPPING), EXAMPLES.woken)).toEqual({ refused: 'became STOPPING while waking' });
  });

  it('sees a sleep it did not ask for: UNHEALTHY, then its known answer decides between READY and FAILED', () => {
    const asleep = { healthy: false, cause: 'asleep', why: 'the engine is asleep' } as const;
    const unasked = applied(lifeIn(S.READY), { kind: 'probe', verdict: asleep });
    expect(unasked).toMatchObject({ state: S.UNHEALTHY, sleptUnasked: true, error: 'the engine is asleep' });
    // Awake again: the probe alone does not make it READY.
    expect(applied(unasked, { kind: 'probe', verdict: well }).state).toBe(S.UNHEALTHY);
    expect(applied(unasked, { kind: 'answer-after-unasked-sleep', verdict: well })).toMatchObject({ state: S.READY, sleptUnasked: false });
    expect(applied(unasked, { kind: 'answer-after-unasked-sleep', lost: 'woke without its weights after a sleep the agent did not ask for: x', verdict: well }).state).toBe(S.FAILED);
  });
});

describe('isServing', () => {
  it('is true for the states an engine serves in, and no other', () => {
    const serving = Object.values(S).filter((v): v is S => typeof v === 'number' && isServing(v));
    expect(serving.sort()).toEqual([S.READY, S.UNHEALTHY, S.DRAINING].sort());
  });
});

