import { describe, expect, it } from 'vitest';
import { judgeDrain } from '../../../../src/agent/supervisor/shard/judge-drain.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../../../src/lib/errors.js';

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
