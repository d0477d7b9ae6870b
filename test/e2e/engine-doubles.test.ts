import { startDoubleAgent, stopDoubleAgent } from '../helpers/double-agent.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { AgentDirs, AgentProcess } from '../helpers/agent-process.js';
import { doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, groupMembers, until } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';

/*
 * The real agent (direct launcher) against the engine doubles, which take
 * vLLM's and SGLang's own command lines and behave as their source says
 * (src/sim/fake-vllm.ts, fake-sglang.ts): the agent's VllmEngine and
 * SglangEngine build the argv, and the agent must stop, probe and read
 * them as those engines need (shared/reviews/engine-fidelity.md §0). The
 * systemd-run launcher's stop is in test/systemd/engine-doubles-units.test.ts.
 */

const NODE = 'node-d';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;

let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-doubles-'));
});

afterAll(() => stopDoubleAgent({ cp, agent, dirs }));

async function startAndWait(spec: StartShard, ...states: ShardState[]): Promise<ShardStatus> {
  const settled = cp.cp.waitFor(NODE, shardIs(spec.shardId, ...(states.length > 0 ? states : [S.READY, S.FAILED, S.EXITED])), 60_000);
  cp.cp.send(NODE, { case: 'start', value: spec });
  return statusOf(await settled);
}

async function stop(id: string): Promise<ShardStatus> {
  const stopped = cp.cp.waitFor(NODE, shardIs(id, S.STOPPED), 60_000);
  cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  return statusOf(await stopped);
}

/** What the agent reported of shard `id` so far, in order. */
const statesOf = (id: string) =>
  cp.cp
    .messages(NODE)
    .filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === id)
    .map((m) => statusOf(m));

describe('the agent stops engines as they expect to be stopped (review §0 #2)', () => {
  it('lets a streamed completion on a TP=2 vLLM shard finish through a StopShard, then reports STOPPED', async () => {
    const port = await freePort();
    const ready = await startAndWait(doubleStart('vllm', 'v-tp2', port, { gpus: [0, 1], args: ['--sim-token-latency', '40ms'] }));
    expect(ready.state, ready.error).toBe(S.READY);
    // Two workers in the engine's process group: what a group SIGTERM killed under the drain.
    expect(groupMembers(ready.pid).length).toBeGreaterThanOrEqual(3);
    const res = await streamChat(port, 30);
    let first: () => void = () => {};
    const firstToken = new Promise<void>((r) => {
      first = r;
    });
    const stream = consumeStream(res, (n) => n === 1 && first());
    await firstToken;
    const stopped = stop('v-tp2');
    const got = await stream;
    expect(got).toEqual({ tokens: 30, done: true });
    await stopped;
    expect(groupMembers(ready.pid)).toEqual([]);
  });

  it('lets a streamed completion on an SGLang shard finish through a StopShard, then reports STOPPED', async () => {
    const port = await freePort();
    // SGLang's drain loop looks every 5 s (tokenizer_manager.py:3114-3158); the test config's stop_grace is 3 s.
    const ready = await startAndWait(doubleStart('sglang', 'g-stop', port, { gpus: [2], args: ['--sim-token-latency', '40ms', '--sim-drain-poll', '500ms'] }));
    expect(ready.state, ready.error).toBe(S.READY);
    expect(groupMembers(ready.pid).length).toBeGreaterThanOrEqual(3); // scheduler and detokenizer
    const res = await streamChat(port, 30);
    let first: () => void = () => {};
    const firstToken = new Promise<void>((r) => {
      first = r;
    });
    const stream = consumeStream(res, (n) => n === 1 && first());
    await firstToken;
    const stopped = stop('g-stop');
    expect(await stream).toEqual({ tokens: 30, done: true });
    await stopped;
    expect(groupMembers(ready.pid)).toEqual([]);
  });
});

describe('probes that fit each engine', () => {
  it('brings SGLang to READY and keeps it there with health_interval 500ms, though its /health_generate takes a second (§0 #6)', async () => {
    const port = await freePort();
    const ready = await startAndWait(doubleStart('sglang', 'g-probe', port, { gpus: [5] }));
    expect(ready.state, ready.error).toBe(S.READY);
    // What each probe meets: a healthy engine answering /health_generate after a second.
    const t0 = Date.now();
    expect((await fetch(`http://127.0.0.1:${port}/health_generate`)).status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    // Eight probe intervals: a 500 ms limit failed every probe, and three made it UNHEALTHY within about 3 s.
    await new Promise((r) => setTimeout(r, 4000));
    expect(statesOf('g-probe').map((s) => S[s.state])).not.toContain('UNHEALTHY');
    await stop('g-probe');
  });

  it('makes keyed vLLM and SGLang profiles READY, and the key never reaches the agent log (§0 #8)', async () => {
    const [p1, p2, p3] = [await freePort(), await freePort(), await freePort()];
    const secret = 'sk-llmgw-test-4b1d';
    const byArg = await startAndWait(doubleStart('vllm', 'v-key', p1, { gpus: [6], args: ['--api-key', secret] }));
    expect(byArg.state, byArg.error).toBe(S.READY);
    // The engine guards /v1: without the key it says 401, so the probe really sent it.
    expect((await fetch(`http://127.0.0.1:${p1}/v1/models`)).status).toBe(401);
    await stop('v-key');
    const byEnv = await startAndWait(doubleStart('vllm', 'v-envkey', p2, { gpus: [6], env: { VLLM_API_KEY: secret } }));
    expect(byEnv.state, byEnv.error).toBe(S.READY);
    await stop('v-envkey');
    const sglang = await startAndWait(doubleStart('sglang', 'g-key', p3, { gpus: [7], args: [`--api-key=${secret}`] }));
    expect(sglang.state, sglang.error).toBe(S.READY);
    await stop('g-key');
    expect(JSON.stringify(agent.logs())).not.toContain(secret);
  });
});

describe('worker ranks (§0 #3) and the node address (§0 #4)', () => {
  it('gives two SGLang worker ranks on one node their own /health ports, and calls each READY when it answers', async () => {
    const [given, leaderA, leaderB] = [await freePort(), await freePort(), await freePort()];
    const a = await startAndWait(doubleStart('sglang', 'g-w1', given, { gpus: [0], nnodes: 2, rank: 1, leaderPort: leaderA, args: ['--sim-load-time', '300ms'] }));
    // http_port 0: the agent chooses one rather than leave both on SGLang's default 30000.
    const b = await startAndWait(doubleStart('sglang', 'g-w2', 0, { gpus: [1], nnodes: 2, rank: 1, leaderPort: leaderB, args: ['--sim-load-time', '300ms'] }));
    expect([a.state, b.state], `${a.error} ${b.error}`).toEqual([S.READY, S.READY]);
    expect((await fetch(`http://127.0.0.1:${given}/health`)).status).toBe(200);
    const chosen = Number(/Dummy health server for node rank 1 on http:\/\/127\.0\.0\.1:(\d+)/.exec(readFileSync(join(dirs.logDir, 'shards', 'g-w2.log'), 'utf8'))?.[1]);
    expect(chosen).toBeGreaterThan(30000);
    expect(chosen).not.toBe(given);
    // READY came on the stream; its log line comes through the agent's stderr, a pipe with no order to the stream.
    const readyLines = () => agent.logs().filter((r) => r.shard === 'g-w2' && r.to === 'READY');
    await until(() => readyLines().length > 0, "g-w2's READY in the agent's log", 30_000);
    const readyWhy = readyLines().map((r) => r.why);
    expect(readyWhy).toEqual(['worker rank answers /health']);
    await stop('g-w1');
    await stop('g-w2');
  });

  it("tells every vLLM rank the node's management address as VLLM_HOST_IP, which its leader binds its broadcast queue on", async () => {
    const [port, leader] = [await freePort(), await freePort()];
    const ready = await startAndWait(doubleStart('vllm', 'v-mn', port, { gpus: [2], nnodes: 2, rank: 0, leaderPort: leader }));
    expect(ready.state, ready.error).toBe(S.READY);
    // mgmt_interface lo: 127.0.0.1, not the default-route address of some other network.
    expect(readFileSync(join(dirs.logDir, 'shards', 'v-mn.log'), 'utf8')).toContain('binding scheduler-output broadcast queue on 127.0.0.1');
    await stop('v-mn');
  });
});

describe('engine versions (§0 #11)', () => {
  it('fails a vLLM without --shutdown-timeout saying which version it needs', async () => {
    const failed = await startAndWait(doubleStart('vllm', 'v-old', await freePort(), { gpus: [5], args: ['--sim-version', '0.17'] }));
    expect(failed.state).toBe(S.FAILED);
    expect(failed.error).toMatch(/^engine exited with code 2 while starting: vLLM older than 0\.18 has no --shutdown-timeout/);
    await stop('v-old');
  });
});
