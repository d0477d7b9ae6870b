import { describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import {
  REPORTED_SHARD_STATES, SHARD_STATES, TERMINAL_SHARD_STATES, deathOutcome, isGangMember, isLaunchDone, isLeaving, isReported, isServing, isStopAsked,
  isTimedOnAdoption, isTrouble, isUnplannedEnd, isWarmedUp, stateName, stateNamed,
} from '../../src/lib/shard-states.js';

/* The one shard vocabulary (issue 38): every value of the proto enum is classified, and the lists derive from it. */

describe('the shard vocabulary', () => {
  const values = Object.values(ShardState).filter((v): v is ShardState => typeof v === 'number');

  it('classifies every value of the proto enum, under the enum\'s own name', () => {
    for (const v of values) expect(SHARD_STATES[v]?.name, `state ${v}`).toBe(ShardState[v]);
    expect(Object.keys(SHARD_STATES).map(Number).sort()).toEqual([...values].sort());
  });

  it('derives the lists the agent, ctl and metrics use', () => {
    expect([...TERMINAL_SHARD_STATES].map(stateName)).toEqual(['STOPPED', 'FAILED', 'EXITED']);
    expect(values.filter(isServing).map(stateName)).toEqual(['READY', 'UNHEALTHY', 'DRAINING']);
    expect(REPORTED_SHARD_STATES).not.toContain(ShardState.UNSPECIFIED);
    expect(REPORTED_SHARD_STATES).toContain(ShardState.SLEEPING);
    expect(stateName(99 as ShardState)).toBe('99');
  });

  // Each fact as the callers relied on it before it was folded here (issue 50): the states it holds, and
  // no other, in the enum's order (SLEEPING came last).
  it.each([
    ['isReported', isReported, ['STARTING', 'READY', 'UNHEALTHY', 'DRAINING', 'STOPPING', 'STOPPED', 'FAILED', 'EXITED', 'SLEEPING']],
    ['isLeaving', isLeaving, ['STOPPING', 'STOPPED', 'FAILED', 'EXITED']],
    ['isGangMember', isGangMember, ['STARTING', 'READY', 'UNHEALTHY', 'DRAINING', 'SLEEPING']],
    ['isStopAsked', isStopAsked, ['STOPPING', 'STOPPED']],
    ['isUnplannedEnd', isUnplannedEnd, ['FAILED', 'EXITED']],
    ['isTrouble', isTrouble, ['UNHEALTHY', 'FAILED']],
    ['isTimedOnAdoption', isTimedOnAdoption, ['UNSPECIFIED', 'STARTING', 'UNHEALTHY', 'DRAINING', 'STOPPING', 'STOPPED', 'FAILED', 'EXITED']],
  ] as const)('%s holds exactly its states', (_name, fact, expected) => {
    expect(values.filter((v) => fact(v)).map(stateName)).toEqual(expected);
  });

  it('answers for a value this build does not know as the callers did before: not reported, not leaving, timed on adoption', () => {
    const unknown = 99 as ShardState;
    expect([isReported, isLeaving, isGangMember, isStopAsked, isUnplannedEnd, isTrouble, isServing].map((f) => f(unknown))).toEqual([false, false, false, false, false, false, false]);
    expect(isTimedOnAdoption(unknown)).toBe(true);
    expect(deathOutcome(unknown)).toBeUndefined();
  });

  it('says what a death makes of a shard: loading or asleep always FAILED, serving EXITED when clean, nothing otherwise', () => {
    const S = ShardState;
    const outcome = (s: ShardState) => {
      const o = deathOutcome(s);
      return o ? `${stateName(o.clean)}/${stateName(o.unclean)}` : '-';
    };
    expect(Object.fromEntries(values.map((v) => [stateName(v), outcome(v)]))).toEqual({
      UNSPECIFIED: '-', STARTING: 'FAILED/FAILED', READY: 'EXITED/FAILED', UNHEALTHY: 'EXITED/FAILED', DRAINING: 'EXITED/FAILED',
      SLEEPING: 'FAILED/FAILED', STOPPING: '-', STOPPED: '-', FAILED: '-', EXITED: '-',
    });
    expect(deathOutcome(S.STOPPING), 'stop() reports a death while stopping').toBeUndefined();
  });

  it('knows a launch done from the other ways to READY', () => {
    const S = ShardState;
    expect(isLaunchDone(S.STARTING, S.READY)).toBe(true);
    // Look-alikes: a wake, a recovery, a cancelled drain reach READY too; a start may end otherwise.
    expect(isLaunchDone(S.SLEEPING, S.READY)).toBe(false);
    expect(isLaunchDone(S.UNHEALTHY, S.READY)).toBe(false);
    expect(isLaunchDone(S.DRAINING, S.READY)).toBe(false);
    expect(isLaunchDone(S.STARTING, S.DRAINING)).toBe(false);
    expect(isLaunchDone(S.STARTING, S.SLEEPING)).toBe(false);
  });

  it('knows a warm-up, a launch\'s or a wake\'s, from a recovery or a cancelled drain', () => {
    const S = ShardState;
    expect(isWarmedUp(S.STARTING, S.READY)).toBe(true);
    expect(isWarmedUp(S.SLEEPING, S.READY)).toBe(true);
    expect(isWarmedUp(S.UNHEALTHY, S.READY)).toBe(false);
    expect(isWarmedUp(S.DRAINING, S.READY)).toBe(false);
    expect(isWarmedUp(S.STARTING, S.SLEEPING)).toBe(false);
    expect(isWarmedUp(S.SLEEPING, S.FAILED)).toBe(false);
  });

  it('finds a state by its exact name only', () => {
    for (const v of values) expect(stateNamed(stateName(v))).toBe(v);
    expect(stateNamed('ready')).toBeUndefined();
    expect(stateNamed('GONE')).toBeUndefined();
    expect(stateNamed('')).toBeUndefined();
  });
});
