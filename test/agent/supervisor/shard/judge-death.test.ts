import { describe, expect, it } from 'vitest';
import { judgeDeath } from '../../../../src/agent/supervisor/shard/judge-death.js';
import { isTransitionAllowed } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { ShardState as S } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { DeathInfo } from '../../../../src/lib/engine-death.js';
import { REPORTED_SHARD_STATES } from '../../../../src/lib/shard-states.js';

/* What an engine's death makes of its shard (moved from shard-machine.test.ts, assertions unchanged; the SLEEPING and table cases added). */

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

  it('fails a SLEEPING shard whose engine dies, even cleanly: nothing asked it to exit', () => {
    expect(judgeDeath(S.SLEEPING, clean)).toEqual({ reap: true, error: 'engine exited with code 0 while sleeping', to: S.FAILED, record: true });
    expect(judgeDeath(S.SLEEPING, unknown)).toMatchObject({ reap: true, to: S.FAILED, record: true });
  });

  it('reaps but reports nothing for a shard not yet supervised', () => {
    expect(judgeDeath(S.UNSPECIFIED, crashed)).toEqual({ reap: true, record: false });
  });

  it('reports only changes the machine allows, from every state, for every kind of death', () => {
    for (const state of [S.UNSPECIFIED, ...REPORTED_SHARD_STATES]) {
      for (const info of [clean, crashed, killed, unknown]) {
        const v = judgeDeath(state, info);
        if (v.to !== undefined) expect(isTransitionAllowed(state, v.to), `${S[state]} → ${S[v.to]}`).toBe(true);
      }
    }
  });
});
