import { describe, expect, it } from 'vitest';
import type { DeathInfo } from '../../../../src/agent/supervisor/launch/death-watch.js';
import { judgeDeath } from '../../../../src/agent/supervisor/shard/judge-death.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';

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
