import type { DeathInfo } from '../../../../src/agent/supervisor/launch/death-watch.js';
import { isServing, isTransitionAllowed, judgeDeath, judgeDrain, judgeSettleStart, judgeSettleWake, ShardHealth } from '../../../../src/agent/supervisor/shard/shard-lifecycle.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../../../src/lib/errors.js';
import { isTerminal } from '../../../../src/lib/shard-states.js';
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

describe('judgeSettleStart', () => {
  it('waits from STARTING', () => {
    expect(judgeSettleStart('s1', S.STARTING)).toBe('wait');
  });

  it.each([S.READY, S.UNHEALTHY, S.DRAINING])('has nothing to wait for when %s', (state) => {
    expect(judgeSettleStart('s1', state)).toBe('serving');
  });

  it.each([S.FAILED, S.EXITED, S.STOPPED])('says a %s shard cannot become ready', (state) => {
    expect(judgeSettleStart('s1', state)).toBe('failed');
  });

  it('refuses a shard being stopped as a stop, not an engine failure', () => {
    expect(() => judgeSettleStart('s1', S.STOPPING)).toThrow('shard s1 is being stopped');
  });
});

describe('judgeSettleWake', () => {
  it('lets the readiness outcome decide while still STARTING', () => {
    expect(judgeSettleWake('s1', S.STARTING, undefined)).toBe('starting');
  });

  it('says FAILED when the shard failed while waiting (its engine died)', () => {
    expect(judgeSettleWake('s1', S.FAILED, undefined)).toBe('failed');
  });

  it.each([S.STOPPING, S.STOPPED])('calls a shard %s while waiting stopped, even though stop() detached it too', (state) => {
    expect(() => judgeSettleWake('s1', state, 'stopped')).toThrow('shard s1 was stopped while starting');
  });

  it('says the supervisor closed when the agent detached the runner while STARTING', () => {
    expect(() => judgeSettleWake('s1', S.STARTING, 'agent-closing')).toThrow('the supervisor is closed');
  });

  it('says the shard was started again when a relaunch replaced the runner while STARTING', () => {
    expect(() => judgeSettleWake('s1', S.STARTING, 'replaced')).toThrow('shard s1 was started again; this run is no longer watched');
  });

  it('says the shard was stopped when a stop detached it while STARTING', () => {
    expect(() => judgeSettleWake('s1', S.STARTING, 'stopped')).toThrow('shard s1 was stopped while starting');
  });
});

const clean: DeathInfo = { known: true, code: 0, signal: null };
const crashed: DeathInfo = { known: true, code: 3, signal: null };
const killed: DeathInfo = { known: true, code: null, signal: 'SIGKILL' };
const unknown: DeathInfo = { known: false, reason: 'pid 42 names another process' };

describe('judgeDeath', () => {
  it('fails a STARTING shard whose engine dies, even cleanly: it never served', () => {
    expect(judgeDeath(S.STARTING, clean)).toEqual({ reap: true, error: 'engine exited with code 0 while starting', to: S.FAILED, record: true });
    expect(judgeDeath(S.STARTING, killed)).toMatchObject({ error: 'engine was killed by SIGKILL while starting', to: S.FAILED });
  });

  it.each([S.READY, S.UNHEALTHY, S.DRAINING])('reports a clean exit of a %s shard as EXITED with no failure record', (state) => {
    expect(judgeDeath(state, clean)).toEqual({ reap: true, error: 'engine exited with code 0', to: S.EXITED, record: false });
  });

  it.each([S.READY, S.UNHEALTHY, S.DRAINING])('reports a crash of a %s shard as FAILED, with a failure record', (state) => {
    expect(judgeDeath(state, crashed)).toEqual({ reap: true, error: 'engine exited with code 3', to: S.FAILED, record: true });
  });

  it('fails a serving shard whose engine is gone with its status unknown (adopted): gone is not a clean exit', () => {
    expect(judgeDeath(S.READY, unknown)).toMatchObject({ to: S.FAILED, record: true });
  });

  it('changes nothing and reaps nothing for a STOPPING shard: stop() reports it', () => {
    expect(judgeDeath(S.STOPPING, killed)).toEqual({ reap: false, record: false });
  });

  it.each([S.STOPPED, S.FAILED, S.EXITED])('changes nothing for a %s shard: its end was reported already', (state) => {
    expect(judgeDeath(state, crashed)).toEqual({ reap: false, record: false });
  });
});

describe('judgeDrain', () => {
  it.each([S.READY, S.UNHEALTHY])('drains a %s shard to DRAINING', (state) => {
    expect(judgeDrain('s1', state, false)).toEqual({ to: S.DRAINING, why: 'drain requested' });
  });

  it('makes a repeated drain a no-op, so a retried ctl drain does not fail', () => {
    expect(judgeDrain('s1', S.DRAINING, false).to).toBeUndefined();
  });

  it.each([S.STARTING, S.STOPPING, S.STOPPED, S.FAILED])('refuses to drain a %s shard, naming its state', (state) => {
    expect(() => judgeDrain('s1', state, false)).toThrow(new RegExp(`^shard s1 is ${S[state]}: only a READY or UNHEALTHY`));
    expect(() => judgeDrain('s1', state, false)).toThrow(LlmgwError);
  });

  it('cancels the drain of a DRAINING shard back to READY', () => {
    expect(judgeDrain('s1', S.DRAINING, true)).toEqual({ to: S.READY, why: 'drain cancelled' });
  });

  it.each([S.READY, S.UNHEALTHY, S.STOPPED])('refuses to cancel the drain of a %s shard', (state) => {
    expect(() => judgeDrain('s1', state, true)).toThrow(`shard s1 is ${S[state]}: only a DRAINING shard can have its drain cancelled`);
  });
});

describe('isServing', () => {
  it('is true for the states an engine serves in, and no other', () => {
    const serving = Object.values(S).filter((v): v is S => typeof v === 'number' && isServing(v));
    expect(serving.sort()).toEqual([S.READY, S.UNHEALTHY, S.DRAINING].sort());
  });
});

describe('ShardHealth', () => {
  const sick = { healthy: false, cause: undefined, why: 'probe timed out' } as const;
  const well = { healthy: true, cause: undefined, why: 'answers /health' } as const;

  it('makes a READY shard UNHEALTHY on a failed probe and READY again when it answers', () => {
    const h = new ShardHealth();
    expect(h.judge(sick, S.READY)).toEqual({ error: 'probe timed out', to: S.UNHEALTHY, why: 'probe timed out' });
    expect(h.judge(well, S.UNHEALTHY)).toEqual({ error: '', to: S.READY, why: 'answers /health' });
    expect(h.judge(well, S.READY)).toBeUndefined();
  });

  it('keeps a shard on a faulted GPU UNHEALTHY although its engine answers, until the fault clears', () => {
    const h = new ShardHealth();
    expect(h.markFault('GPU 3: Xid 79', S.READY)).toEqual({ error: 'GPU 3: Xid 79', to: S.UNHEALTHY, why: 'GPU 3: Xid 79' });
    expect(h.judge(well, S.UNHEALTHY)).toBeUndefined();
    expect(h.markFault('GPU 3: Xid 79', S.UNHEALTHY), 'the same fault again changes nothing').toBeUndefined();
    expect(h.clearFault(S.UNHEALTHY, 'GPU 3: Xid 79')).toEqual({ error: '', to: S.READY, why: 'GPU fault cleared (GPU 3: Xid 79)' });
  });

  it('holds a fault raised while loading until the shard serves', () => {
    const h = new ShardHealth();
    expect(h.markFault('GPU 1: double-bit ECC', S.STARTING)).toBeUndefined();
    expect(h.serving()).toEqual({ error: 'GPU 1: double-bit ECC', to: S.UNHEALTHY, why: 'GPU 1: double-bit ECC' });
  });

  it('leaves a cleared fault UNHEALTHY while the probe still fails', () => {
    const h = new ShardHealth();
    h.markFault('GPU 2: Xid 48', S.READY);
    h.judge(sick, S.UNHEALTHY);
    expect(h.clearFault(S.UNHEALTHY, 'GPU 2: Xid 48')).toEqual({ error: '', why: 'GPU fault cleared (GPU 2: Xid 48)' });
  });
});
