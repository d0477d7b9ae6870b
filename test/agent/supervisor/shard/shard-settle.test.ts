import { describe, expect, it } from 'vitest';
import { judgeSettleStart, judgeSettleWake } from '../../../../src/agent/supervisor/shard/shard-settle.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';

/* What a readiness wait makes of the state it woke in (moved from shard-machine.test.ts, assertions unchanged). */

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
