import { describe, expect, it } from 'vitest';
import { isTerminal, isTransitionAllowed } from '../../../../src/agent/supervisor/shard/shard-transitions.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';

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
