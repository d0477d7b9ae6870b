import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, type RunningShard, ShardState, type ShardStatus, SleepShardSchema, type StartShard, StopShardSchema, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { type AgentDirs, type AgentProcess, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { fakeGpuUsage, gpuUsageDir, startDoubleAgent } from '../helpers/double-agent.js';

/*
 * Issue 36: READY after a wake means the weights are back. Against the
 * honest doubles (a vLLM level-2 wake without reload_weights, an SGLang
 * resume without a CPU backup: both answer every token '!'), through the
 * real agent: each wake is proved by the known answer, a wake that loses the
 * weights is FAILED and never READY, an agent killed while SGLang sleeps
 * adopts it SLEEPING, and a sleeping shard stops at once.
 */

const NODE = 'node-weights';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
const stateFile = (id: string) => JSON.parse(readFileSync(join(dirs.stateDir, 'shards', `${id}.json`), 'utf8')) as Record<string, unknown>;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;

const startAgent = () => startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir } });

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-weights-', [], fakeGpuUsage));
  usageDir = gpuUsageDir(dirs);
});

afterAll(() => endAgentFixture({ agent, cp, dirs }));

/** MiB each double holds: little enough that a sleep keeping a host copy (vLLM level 1, SGLang both) fits this machine's RAM. */
const GPU_MIB = 8000;

function sleepyStart(id: string, port: number, gpu: number, engine: 'vllm' | 'sglang', extra: string[] = []): StartShard {
  const spec = doubleStart(engine, id, port, { gpus: [gpu], args: ['--sim-gpu-memory', String(GPU_MIB), '--sim-gpu-usage-dir', usageDir, '--sim-token-latency', '20ms', ...extra] });
  if (spec.profile) spec.profile.sleepMode = true;
  return spec;
}

async function startReady(spec: StartShard): Promise<ShardStatus> {
  const readyP = cp.cp.waitFor(NODE, shardIs(spec.shardId, S.READY, S.FAILED), 60_000);
  cp.cp.send(NODE, { case: 'start', value: spec });
  const ready = statusOf(await readyP);
  expect(ready.state, ready.error).toBe(S.READY);
  return ready;
}

async function send(id: string, msg: { case: 'sleep'; level: number } | { case: 'wake' } | { case: 'stop' }, ...states: ShardState[]): Promise<ShardStatus> {
  const got = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === id && (states.includes(m.msg.value.state) || m.msg.value.error !== ''), 60_000);
  if (msg.case === 'sleep') cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: id, level: msg.level }) });
  else if (msg.case === 'wake') cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: id }) });
  else cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  return statusOf(await got);
}

async function asleep(id: string, level: number, gpu: number): Promise<void> {
  const released = () => agent.logs().filter((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === id).length;
  const before = released();
  const sleeping = await send(id, { case: 'sleep', level }, S.SLEEPING);
  expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
  await until(() => released() > before, `shard ${id} asleep`, 60_000);
  expect(readGpuUsage(usageDir).get(gpu)).toBeLessThan(GPU_MIB / 2);
}

/** The double's greedy answer to a plain completion, as a client gets it. */
async function completion(port: number, maxTokens = 4): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'Say something', max_tokens: maxTokens, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: { text: string }[] };
  return body.choices[0]?.text ?? '';
}

const transitionsOf = (id: string) => agent.logs().filter((r) => r.msg === 'shard state changed' && r.shard === id);

describe('a wake is READY only with the weights back (issue 36)', () => {
  it('wakes vLLM from level 2 by reloading its weights, proved by the answer it gave at its first READY', async () => {
    const port = await freePort();
    await startReady(sleepyStart('v-2', port, 2, 'vllm'));
    await until(() => typeof stateFile('v-2').knownAnswer === 'string', 'the known answer recorded', 30_000);
    const recorded = String(stateFile('v-2').knownAnswer);
    expect(recorded).not.toMatch(/!/);
    const before = await completion(port);
    await asleep('v-2', 2, 2);
    const woken = await send('v-2', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(await completion(port)).toBe(before);
    const ready = transitionsOf('v-2').at(-1);
    expect(ready?.to).toBe('READY');
    expect(String(ready?.why)).toMatch(/gives its known answer/);
  });

  it('wakes SGLang from level 1 and level 2, each from its CPU backup, each proved, each answering as before', async () => {
    const port = await freePort();
    await startReady(sleepyStart('g-12', port, 5, 'sglang'));
    const before = await completion(port);
    expect(before).not.toMatch(/!/);
    for (const level of [1, 2]) {
      await asleep('g-12', level, 5);
      const woken = await send('g-12', { case: 'wake' }, S.READY);
      expect(woken.state, `level ${level}: ${woken.error}`).toBe(S.READY);
      expect(await completion(port)).toBe(before);
    }
    expect(transitionsOf('g-12').some((r) => r.to === 'FAILED')).toBe(false);
  });

  it('reports a wake that loses the weights FAILED "woke without its weights", never READY, and leaves the engine to the control plane', async () => {
    const port = await freePort();
    const ready = await startReady(sleepyStart('v-lost', port, 6, 'vllm', ['--sim-wake-loses-weights']));
    await asleep('v-lost', 1, 6);
    const woken = await send('v-lost', { case: 'wake' }, S.READY, S.FAILED);
    expect(woken.state).toBe(S.FAILED);
    expect(woken.error).toMatch(/^woke without its weights: it answers "!+" to "1, 2, 3/);
    const afterSleep = transitionsOf('v-lost').slice(transitionsOf('v-lost').findIndex((r) => r.to === 'SLEEPING'));
    expect(afterSleep.some((r) => r.to === 'READY')).toBe(false);
    expect(isRunning(ready.pid)).toBe(true);
  });

  it('stops a sleeping SGLang shard at once: its held request sees the connection close, the shard is STOPPED', async () => {
    const port = await freePort();
    await startReady(sleepyStart('g-stop', port, 7, 'sglang'));
    await asleep('g-stop', 1, 7);
    // Held in SGLang's tokenizer by the pause: its drain would count it and never end.
    const held = streamChat(port, 3).then(
      async (r) => {
        try {
          await r.text();
          return 'answered';
        } catch {
          return 'cut';
        }
      },
      () => 'cut',
    );
    const stopped = await send('g-stop', { case: 'stop' }, S.STOPPED);
    expect(stopped.state, stopped.error).toBe(S.STOPPED);
    expect(await held).toBe('cut');
    const stopping = transitionsOf('g-stop').find((r) => r.to === 'STOPPING');
    expect(String(stopping?.why)).toMatch(/^stop requested while asleep: nothing to drain/);
  });

  it('sees a sleep it did not ask for (the dev endpoints take no key: security review 3, S6): UNHEALTHY at once, READY again only with the known answer, FAILED when woken without the weights', async () => {
    const port = await freePort();
    await startReady(sleepyStart('v-unasked', port, 0, 'vllm'));
    await until(() => typeof stateFile('v-unasked').knownAnswer === 'string', 'the known answer recorded', 30_000);
    const post = (path: string) => fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST' }).then((r) => r.status);
    // Any local user, without a key: a level 1 sleep, then a wake.
    const unhealthy = cp.cp.waitFor(NODE, shardIs('v-unasked', S.UNHEALTHY, S.FAILED), 30_000);
    expect(await post('/sleep?level=1')).toBe(200);
    const u = statusOf(await unhealthy);
    expect(S[u.state]).toBe('UNHEALTHY');
    expect(u.error).toMatch(/^the engine is asleep \(vllm:engine_sleep_state\{sleep_state="awake"\} is 0\), and the agent did not put it to sleep/);
    const back = cp.cp.waitFor(NODE, shardIs('v-unasked', S.READY, S.FAILED), 30_000);
    expect(await post('/wake_up')).toBe(200);
    const r = statusOf(await back);
    expect(S[r.state], r.error).toBe('READY');
    expect(String(transitionsOf('v-unasked').at(-1)?.why)).toMatch(/awake again .*gives its known answer/);
    // Level 2 discards the weights; a bare /wake_up brings back memory, not weights: never READY.
    const unhealthy2 = cp.cp.waitFor(NODE, shardIs('v-unasked', S.UNHEALTHY, S.FAILED), 30_000);
    expect(await post('/sleep?level=2')).toBe(200);
    expect(S[statusOf(await unhealthy2).state]).toBe('UNHEALTHY');
    const failed = cp.cp.waitFor(NODE, shardIs('v-unasked', S.READY, S.FAILED), 30_000);
    expect(await post('/wake_up')).toBe(200);
    const f = statusOf(await failed);
    expect(S[f.state]).toBe('FAILED');
    expect(f.error).toMatch(/^woke without its weights after a sleep the agent did not ask for: it answers "!+"/);
    expect(isRunning(f.pid)).toBe(true);
    await send('v-unasked', { case: 'stop' }, S.STOPPED);
  });

  // Last: it replaces the suite's agent.
  it('adopts an SGLang shard asleep (paused and released) across a kill -9 of the agent SLEEPING, without a generating probe, and wakes it answering', async () => {
    const port = await freePort();
    const ready = await startReady(sleepyStart('g-kill', port, 1, 'sglang'));
    const before = await completion(port);
    await until(() => typeof stateFile('g-kill').knownAnswer === 'string', 'the known answer recorded', 30_000);
    await asleep('g-kill', 2, 1);
    agent.kill('SIGKILL');
    await agent.exited;
    expect(isRunning(ready.pid)).toBe(true);
    const reRegistered = cp.cp.waitFor(NODE, isRegister, 30_000);
    agent = startAgent();
    const reg = (await reRegistered).msg.value as { runningShards: RunningShard[] };
    expect(reg.runningShards.find((r) => r.shardId === 'g-kill')?.state).toBe(S.SLEEPING);
    const second = agent;
    await until(() => second.logs().some((r) => r.msg === 'shard state changed' && r.shard === 'g-kill' && r.to === 'SLEEPING'), 'the adopted shard to settle SLEEPING', 60_000);
    expect(second.logs().some((r) => r.shard === 'g-kill' && (r.to === 'FAILED' || r.to === 'READY'))).toBe(false);
    const woken = await send('g-kill', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(isRunning(ready.pid)).toBe(true);
    expect(await completion(port)).toBe(before);
  }, 120_000);
});
