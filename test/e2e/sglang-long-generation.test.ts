import { startDoubleAgent, stopDoubleAgent } from '../helpers/double-agent.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { AgentDirs, AgentProcess } from '../helpers/agent-process.js';
import { doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 25's acceptance, as stated: a 60 s healthy generation on SGLang with
 * stall_timeout: 5s is never UNHEALTHY; a hung one is, "stalled". SGLang's
 * sglang:generation_tokens_total grows once per finished request
 * (S:python/sglang/srt/observability/metrics_collector.py:1740-1757 at
 * v0.5.18), so one long stream left it flat for its whole length; the agent
 * reads sglang:realtime_tokens_total, which grows every decode step. Its own
 * file, so the time it takes runs beside the other files.
 *
 * Scaled down by 5/2, the ratio the judgement rests on kept: the healthy
 * stream lasts 12 stall timeouts (24 s at stall_timeout 2s, as 60 s at 5s
 * did), long past the 2 s in which a flat generation_tokens_total would
 * have called it stalled. 2 s is still 4 health reads (health_interval
 * 500ms) and 40 tokens of the double (50 ms each), so a loaded machine that
 * delays a token or a read does not make the stream look flat.
 */
const STALL_TIMEOUT_S = 2;
/** 12 stall timeouts of tokens at 50 ms each. */
const LONG_TOKENS = (12 * STALL_TIMEOUT_S * 1000) / 50;

const NODE = 'node-long';
const S = ShardState;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-long-', [`stall_timeout: ${STALL_TIMEOUT_S}s`]));
});

afterAll(() => stopDoubleAgent({ cp, agent, dirs }));

const statesOf = (id: string) =>
  cp.cp
    .messages(NODE)
    .filter((m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.shardId === id)
    .map((m) => m.msg.value as ShardStatus);

async function ready(id: string, port: number, args: string[], gpu: number): Promise<void> {
  const settled = cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 60_000);
  cp.cp.send(NODE, { case: 'start', value: doubleStart('sglang', id, port, { gpus: [gpu], args }) });
  const s = (await settled).msg.value as ShardStatus;
  expect(s.state, s.error).toBe(S.READY);
}

describe(`SGLang stall detection with stall_timeout ${STALL_TIMEOUT_S}s`, () => {
  it(`never calls a generation of 12 stall timeouts (${12 * STALL_TIMEOUT_S} s) UNHEALTHY, and calls a hung one stalled`, { timeout: 150_000 }, async () => {
    const [longPort, hungPort] = [await freePort(), await freePort()];
    await ready('g-60s', longPort, ['--sim-token-latency', '50ms'], 0);
    await ready('g-hung', hungPort, ['--sim-token-latency', '50ms', '--sim-stall-after', '3s'], 1);
    void streamChat(hungPort, 100_000)
      .then((r) => consumeStream(r))
      .catch(() => undefined);
    const stalled = cp.cp.waitFor(NODE, shardIs('g-hung', S.UNHEALTHY), 90_000);
    const started = Date.now();
    const got = await consumeStream(await streamChat(longPort, LONG_TOKENS));
    expect(Date.now() - started).toBeGreaterThanOrEqual(12 * STALL_TIMEOUT_S * 1000);
    expect(got).toEqual({ tokens: LONG_TOKENS, done: true });
    expect(statesOf('g-60s').map((s) => S[s.state])).toEqual(['STARTING', 'READY']);
    expect(((await stalled).msg.value as ShardStatus).error).toMatch(/^stalled: 1 request running, no token generated for \d+ s$/);
  });
});
