import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, type RunningShard, ShardState, type ShardStatus, SleepShardSchema, type StartShard, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { type AgentDirs, type AgentProcess, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { fakeGpuUsage, gpuUsageDir, startDoubleAgent } from '../helpers/double-agent.js';

/*
 * SleepShard / WakeShard through the real agent and the vLLM and SGLang
 * doubles (issue 30): the double frees the memory the fake nvidia-smi shows
 * for its GPUs, the agent sees it fall through its own GPU memory sampler.
 */

const NODE = 'node-sleep';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
const stateFile = (id: string) => JSON.parse(readFileSync(join(dirs.stateDir, 'shards', `${id}.json`), 'utf8')) as Record<string, unknown>;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-sleep-', [], fakeGpuUsage));
  usageDir = gpuUsageDir(dirs);
});

afterAll(() => endAgentFixture({ agent, cp, dirs }));

/**
 * MiB an SGLang double holds: SGLang sleeps keep a host copy of the weights
 * at both levels (--enable-weights-cpu-backup), and the agent refuses a
 * sleep the host has no room for; 70000 MiB would not fit this machine.
 */
const SG_MIB = 8000;

function sleepyStart(id: string, port: number, sleepMode = true, gpu = 5, engine: 'vllm' | 'sglang' = 'vllm'): StartShard {
  const spec = doubleStart(engine, id, port, { gpus: [gpu], args: ['--sim-gpu-memory', engine === 'sglang' ? String(SG_MIB) : '70000', '--sim-gpu-usage-dir', usageDir, '--sim-token-latency', '30ms'] });
  if (spec.profile) spec.profile.sleepMode = sleepMode;
  return spec;
}

async function send(id: string, msg: { case: 'sleep'; level: number } | { case: 'wake' }, ...states: ShardState[]): Promise<ShardStatus> {
  const got = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === id && (states.includes(m.msg.value.state) || m.msg.value.error !== ''), 60_000);
  if (msg.case === 'sleep') cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: id, level: msg.level }) });
  else cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: id }) });
  return statusOf(await got);
}

/**
 * The agent saw the shard's memory fall. Its log, not a second SLEEPING
 * status: the outbox coalesces statuses per shard, so the sleep's two may go out as one.
 */
async function asleepLogged(id: string): Promise<void> {
  await until(() => agent.logs().some((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === id), `shard ${id} asleep`, 60_000);
}

describe('SleepShard and WakeShard (issue 30)', () => {
  it('sleeps a READY vLLM shard (GPU memory released), aborts what it held, and wakes it READY and answering', async () => {
    const port = await freePort();
    const readyP = cp.cp.waitFor(NODE, shardIs('s-1', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('s-1', port) });
    expect(statusOf(await readyP).state).toBe(S.READY);
    expect(readGpuUsage(usageDir).get(5)).toBe(70000);
    // A stream in flight when the sleep comes: vLLM's mode=abort ends it (core.py pause_scheduler).
    const stream = consumeStream(await streamChat(port, 500));
    const sleeping = await send('s-1', { case: 'sleep', level: 2 }, S.SLEEPING);
    expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
    await asleepLogged('s-1');
    expect((await stream).done).toBe(false);
    expect(readGpuUsage(usageDir).get(5)).toBeLessThan(70000 / 2);
    const woken = await send('s-1', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(readGpuUsage(usageDir).get(5)).toBe(70000);
    const again = await consumeStream(await streamChat(port, 3));
    expect(again).toEqual({ tokens: 3, done: true });
  });

  it('refuses level 3, an unknown shard and a profile without sleep_mode with one line each, and the shard stays READY', async () => {
    const port = await freePort();
    const readyP = cp.cp.waitFor(NODE, shardIs('s-2', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('s-2', port, false, 6) });
    expect(statusOf(await readyP).state).toBe(S.READY);
    const noMode = await send('s-2', { case: 'sleep', level: 1 });
    expect(noMode.state).toBe(S.READY);
    expect(noMode.error).toMatch(/^sleep refused: profile .* does not set sleep_mode$/);
    const level3 = await send('s-2', { case: 'sleep', level: 3 });
    expect(level3.state).toBe(S.READY);
    expect(level3.error).toMatch(/^sleep refused: level 3 is not 1/);
    const unknown = await send('nope', { case: 'sleep', level: 1 });
    expect(unknown.error).toMatch(/^sleep refused: no running shard "nope"/);
    const wake = await send('s-2', { case: 'wake' });
    expect(wake.state).toBe(S.READY);
    expect(wake.error).toMatch(/^wake refused: shard s-2 is READY/);
    const res = await consumeStream(await streamChat(port, 2));
    expect(res).toEqual({ tokens: 2, done: true });
  });

  it('sleeps a READY SGLang shard (memory released), holds a request sent meanwhile without losing the engine, and wakes it READY with that request answered', async () => {
    const port = await freePort();
    const readyP = cp.cp.waitFor(NODE, shardIs('g-1', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('g-1', port, true, 1, 'sglang') });
    const ready = statusOf(await readyP);
    expect(ready.state, ready.error).toBe(S.READY);
    expect(readGpuUsage(usageDir).get(1)).toBe(SG_MIB);
    const sleeping = await send('g-1', { case: 'sleep', level: 2 }, S.SLEEPING);
    expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
    await asleepLogged('g-1');
    expect(readGpuUsage(usageDir).get(1)).toBeLessThan(SG_MIB / 2);
    // SGLang runs whatever reaches its scheduler, on the released memory too:
    // the agent's /pause_generation keeps this one in the tokenizer.
    let answered = false;
    const held = streamChat(port, 3).then((r) => {
      answered = true;
      return consumeStream(r);
    });
    await sleep(1500);
    expect(answered).toBe(false);
    const woken = await send('g-1', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(readGpuUsage(usageDir).get(1)).toBe(SG_MIB);
    expect(await held).toEqual({ tokens: 3, done: true });
    expect(await consumeStream(await streamChat(port, 2))).toEqual({ tokens: 2, done: true });
    expect(agent.logs().some((r) => r.shard === 'g-1' && r.to === 'FAILED')).toBe(false);
  });

  // Last: it replaces the suite's agent.
  it('`ctl sleep` and `ctl wake` on the node do what SleepShard and WakeShard do, the control plane hearing each, and refuse with one line', async () => {
    const port = await freePort();
    const readyP = cp.cp.waitFor(NODE, shardIs('c-1', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('c-1', port, true, 2) });
    expect(statusOf(await readyP).state).toBe(S.READY);
    // Level 2: level 1 would move its 70000 MiB to host RAM, which a test machine may not have.
    const heardAsleep = cp.cp.waitFor(NODE, shardIs('c-1', S.SLEEPING), 60_000);
    heardAsleep.catch(() => {});
    const slept = await runCli(['ctl', 'sleep', 'c-1', '--level', '2', '--socket', dirs.socket]);
    expect(slept.exitCode, slept.stderr).toBe(0);
    expect(slept.stdout).toMatch(/^shard c-1 is SLEEPING after \S+: its GPU memory is free and traffic goes elsewhere; llmgw ctl wake c-1 brings it back$/m);
    await heardAsleep;
    expect(readGpuUsage(usageDir).get(2)).toBeLessThan(70000);
    const again = await runCli(['ctl', 'sleep', 'c-1', '--socket', dirs.socket]);
    expect(again.exitCode).toBe(1);
    expect(again.stderr).toMatch(/is SLEEPING; only a READY shard can sleep/);
    expect((await runCli(['ctl', 'sleep', 'c-1', '--level', '3', '--socket', dirs.socket])).exitCode).toBe(2);
    expect((await runCli(['ctl', 'wake', 'no-such', '--socket', dirs.socket])).stderr).toMatch(/no-such/);
    const heardAwake = cp.cp.waitFor(NODE, shardIs('c-1', S.READY), 60_000);
    heardAwake.catch(() => {});
    const woke = await runCli(['ctl', 'wake', 'c-1', '--json', '--socket', dirs.socket]);
    expect(woke.exitCode, woke.stderr).toBe(0);
    expect((JSON.parse(woke.stdout) as { shard: { state: string } }).shard.state).toBe('SHARD_STATE_READY');
    await heardAwake;
    expect(await consumeStream(await streamChat(port, 2))).toEqual({ tokens: 2, done: true });
  }, 120_000);

  it('records the sleep in the state file, so an agent restarted after kill -9 adopts the engine SLEEPING (never READY) and can wake it', async () => {
    const port = await freePort();
    const readyP = cp.cp.waitFor(NODE, shardIs('s-3', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('s-3', port, true, 7) });
    const ready = statusOf(await readyP);
    expect(ready.state).toBe(S.READY);
    const sleeping = await send('s-3', { case: 'sleep', level: 2 }, S.SLEEPING);
    expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
    await asleepLogged('s-3');
    // What GPU 7 held awake: the engine's 70000 MiB and the fake node's own few.
    expect(stateFile('s-3').sleepLevel).toBe(2);
    expect(stateFile('s-3').sleepAwakeMib).toBeGreaterThanOrEqual(70000);
    const pid = ready.pid;
    // An SGLang shard whose agent is killed after it recorded the sleep and before the engine released: awake, recorded asleep.
    const gPort = await freePort();
    const gReady = cp.cp.waitFor(NODE, shardIs('g-3', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: sleepyStart('g-3', gPort, true, 0, 'sglang') });
    const g = statusOf(await gReady);
    expect(g.state, g.error).toBe(S.READY);

    agent.kill('SIGKILL');
    await agent.exited;
    expect(isRunning(pid)).toBe(true);
    const gFile = join(dirs.stateDir, 'shards', 'g-3.json');
    writeFileSync(gFile, `${JSON.stringify({ ...stateFile('g-3'), sleepLevel: 2, sleepAwakeMib: SG_MIB }, null, 2)}\n`);
    const reRegistered = cp.cp.waitFor(NODE, isRegister, 30_000);
    agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir } });
    const reg = (await reRegistered).msg.value as { runningShards: RunningShard[] };
    expect(reg.runningShards.find((r) => r.shardId === 's-3')?.state).toBe(S.SLEEPING);
    const second = agent;
    await until(() => second.logs().some((r) => r.msg === 'shard state changed' && r.shard === 's-3' && r.to === 'SLEEPING'), 'the adopted shard to settle SLEEPING', 30_000);
    expect(second.logs().some((r) => r.msg === 'shard state changed' && r.shard === 's-3' && r.to === 'READY')).toBe(false);
    expect(readGpuUsage(usageDir).get(7)).toBeLessThan(70000 / 2);

    const woken = await send('s-3', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(stateFile('s-3').sleepLevel).toBeUndefined();
    expect(await consumeStream(await streamChat(port, 2))).toEqual({ tokens: 2, done: true });

    // The SGLang engine recorded asleep holds all its memory: adopted SLEEPING, woken without a resume (which SGLang dies of), same engine.
    expect(reg.runningShards.find((r) => r.shardId === 'g-3')?.state).toBe(S.SLEEPING);
    // Its adoption settles on its own (SGLang's /health_generate takes a second): s-3's wake,
    // once it waited for the sampler's tick, used to give it that second.
    await until(() => second.logs().some((r) => r.msg === 'shard state changed' && r.shard === 'g-3' && r.to === 'SLEEPING'), 'the adopted g-3 to settle SLEEPING', 30_000);
    const gWoken = await send('g-3', { case: 'wake' }, S.READY);
    expect(gWoken.state, gWoken.error).toBe(S.READY);
    expect(second.logs().some((r) => r.shard === 'g-3' && /never released/.test(String(r.msg)))).toBe(true);
    expect(isRunning(g.pid)).toBe(true);
    expect(await consumeStream(await streamChat(gPort, 2))).toEqual({ tokens: 2, done: true });
  }, 120_000);
});
