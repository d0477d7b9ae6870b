import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, SleepShardSchema, type StartShard, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { GPU_FIXTURES } from '../helpers/fake-gpus.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 47 item 5 through the real agent and the unkind doubles (review
 * engine-fidelity-3 E3, E4, E6, E14): each sleep or wake the engine cannot
 * survive is refused in one line with the engine untouched, and each
 * look-alike goes through.
 */

const NODE = 'node-sleep-refusals';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;
let procsFile: string;
const squatters: ChildProcess[] = [];

/** The fake box's GPU uuids by index (what nvidia-smi --query-compute-apps names a GPU by). */
const uuidOf = (gpu: number) =>
  readFileSync(join(GPU_FIXTURES, 'hgx-h100x8', 'query-gpu.csv'), 'utf8')
    .split('\n')
    .map((l) => l.split(',').map((c) => c.trim()))
    .find((c) => c[0] === String(gpu))?.[1] as string;

/** This host's MemAvailable in MiB, what the agent judges SGLang's pinned copy by. */
const memAvailableMib = () => Math.floor(Number(/^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1]) / 1024);

beforeAll(async () => {
  cp = await startControlPlane();
  dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-sleep-refusals-')));
  usageDir = join(dirs.root, 'gpu-usage');
  mkdirSync(usageDir, { recursive: true });
  procsFile = join(dirs.root, 'gpu-procs.csv');
  writeFileSync(procsFile, '');
  const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
  agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir, LLMGW_FAKE_GPU_PROCS: procsFile } });
  await registered;
});

afterAll(async () => {
  for (const s of squatters) s.kill('SIGKILL');
  await endAgentFixture({ agent, cp, dirs });
});

function sleepyStart(id: string, port: number, gpu: number, engine: 'vllm' | 'sglang', mib: number, extra: string[] = []): StartShard {
  const spec = doubleStart(engine, id, port, { gpus: [gpu], args: ['--sim-gpu-memory', String(mib), '--sim-gpu-usage-dir', usageDir, '--sim-token-latency', '20ms', ...extra] });
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

/** Sends a sleep or wake; resolves with the first status of the shard in one of `states` or carrying an error. */
async function send(id: string, msg: { case: 'sleep'; level: number } | { case: 'wake' }, ...states: ShardState[]): Promise<ShardStatus> {
  const got = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === id && (states.includes(m.msg.value.state) || m.msg.value.error !== ''), 60_000);
  if (msg.case === 'sleep') cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: id, level: msg.level }) });
  else cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: id }) });
  return statusOf(await got);
}

const stateFile = (id: string) => JSON.parse(readFileSync(join(dirs.stateDir, 'shards', `${id}.json`), 'utf8')) as Record<string, unknown>;
const isSleeping = async (port: number) => ((await (await fetch(`http://127.0.0.1:${port}/is_sleeping`)).json()) as { is_sleeping: boolean }).is_sleeping;
const released = (id: string) => agent.logs().filter((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === id).length;

/** A process outside llmgw holding `mib` on `gpu`: listed by the fake nvidia-smi, and seen by the doubles. */
function squat(gpu: number, mib: number): number {
  const child = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
  squatters.push(child);
  const pid = child.pid as number;
  writeFileSync(procsFile, `${pid}, ${uuidOf(gpu)}, ${mib}, train.py\n`);
  writeFileSync(join(usageDir, `${pid}.csv`), `${gpu},${mib}\n`);
  return pid;
}

function unsquat(pid: number): void {
  writeFileSync(procsFile, '');
  rmSync(join(usageDir, `${pid}.csv`), { force: true });
  squatters.find((s) => s.pid === pid)?.kill('SIGKILL');
}

describe('vLLM sleeps refused by what the engine is (E3, E6)', () => {
  it('refuses level 2 of a vLLM before #44483 (0.22.0), engine untouched and READY; level 1 of it sleeps and wakes', async () => {
    const port = await freePort();
    const ready = await startReady(sleepyStart('v-old', port, 0, 'vllm', 8000, ['--sim-version', '0.22.0']));
    await until(() => stateFile('v-old').engineVersion === '0.22.0', 'the version read at READY and recorded', 30_000);
    const refused = await send('v-old', { case: 'sleep', level: 2 }, S.SLEEPING);
    expect(refused.state).toBe(S.READY);
    expect(refused.error).toMatch(/^sleep refused: vLLM 0\.22\.0 lacks #44483 \(first in 0\.24\.0\): a level-2 wake resumes its scheduler .*; use level 1, or run vLLM >= 0\.24\.0$/);
    expect(await isSleeping(port)).toBe(false);
    expect(readGpuUsage(usageDir).get(0)).toBe(8000);
    expect(isRunning(ready.pid)).toBe(true);
    // The look-alike: level 1 wakes with every tag at once, which 0.22.0 survives.
    const before = released('v-old');
    const asleep = await send('v-old', { case: 'sleep', level: 1 }, S.SLEEPING);
    expect(asleep.state, asleep.error).toBe(S.SLEEPING);
    await until(() => released('v-old') > before, 'asleep', 60_000);
    const woken = await send('v-old', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
  });

  it('refuses level 2 with a loader that cannot reload (--load-format tensorizer), engine untouched; the default loader sleeps at level 2', async () => {
    const port = await freePort();
    await startReady(sleepyStart('v-tz', port, 1, 'vllm', 8000, ['--load-format', 'tensorizer']));
    const refused = await send('v-tz', { case: 'sleep', level: 2 }, S.SLEEPING);
    expect(refused.state).toBe(S.READY);
    expect(refused.error).toMatch(/^sleep refused: level 2 with --load-format tensorizer: its loader cannot reload/);
    expect(await isSleeping(port)).toBe(false);
    const ok = await freePort();
    await startReady(sleepyStart('v-st', ok, 2, 'vllm', 8000, ['--load-format', 'safetensors']));
    const before = released('v-st');
    expect((await send('v-st', { case: 'sleep', level: 2 }, S.SLEEPING)).state).toBe(S.SLEEPING);
    await until(() => released('v-st') > before, 'asleep', 60_000);
    const woken = await send('v-st', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    // A level-2 wake reads the model again: its deadline from its bytes (no store here: the 8000 MiB its GPU held) at the assumed disk rate.
    const waking = agent.logs().find((r) => r.msg === 'waking shard' && r.shard === 'v-st');
    const mib = Number(/^level-2 reload of (\d+) MiB \(what its GPUs held awake\) at an assumed 200 MiB\/s \(no disk rate measured yet\), 2x, plus 120 s$/.exec(String(waking?.why))?.[1]);
    expect(mib).toBeGreaterThanOrEqual(8000);
    expect(waking?.timeoutMs).toBe(120_000 + (2 * mib * 1000) / 200);
  });

  it('refuses a wake onto a GPU a process no shard owns now holds, naming its pid, the engine left asleep; wakes once it is gone, its own pid listed', async () => {
    const port = await freePort();
    const ready = await startReady(sleepyStart('v-sq', port, 5, 'vllm', 8000));
    const before = released('v-sq');
    expect((await send('v-sq', { case: 'sleep', level: 1 }, S.SLEEPING)).state).toBe(S.SLEEPING);
    await until(() => released('v-sq') > before, 'asleep', 60_000);
    const pid = squat(5, 72000);
    const refused = await send('v-sq', { case: 'wake' }, S.READY);
    expect(refused.state).toBe(S.SLEEPING);
    expect(refused.error).toBe(`wake refused: GPU 5 holds 72000 MiB of pid ${pid} (train.py), which no shard owns; shard v-sq is left asleep: stop that process, then wake it`);
    expect(await isSleeping(port)).toBe(true);
    unsquat(pid);
    // The look-alike: the sleeping engine's own process on its GPU.
    writeFileSync(procsFile, `${ready.pid}, ${uuidOf(5)}, 160, python3\n`);
    const woken = await send('v-sq', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
    writeFileSync(procsFile, '');
  });
});

describe('SGLang sleeps refused by the host room its pinned copy needs (E4, E14)', () => {
  it('refuses level 2 and level 1 alike when the pinned copy does not fit MemAvailable, never recommending level 2, the engine untouched', async () => {
    const mib = memAvailableMib() + 12_000;
    // The shard's GPU must hold it: this host has less RAM available than an H100 has memory.
    expect(mib).toBeLessThan(81_000);
    const port = await freePort();
    const ready = await startReady(sleepyStart('g-big', port, 6, 'sglang', mib));
    for (const level of [2, 1]) {
      const refused = await send('g-big', { case: 'sleep', level }, S.SLEEPING);
      expect(refused.state, `level ${level}`).toBe(S.READY);
      expect(refused.error).toMatch(new RegExp(`^sleep refused: level ${level} copies up to \\d+ MiB of weights to pinned host RAM and only \\d+ MiB is available \\(MemAvailable\\); free host memory, or stop the shard instead \\(SGLang keeps this copy at both levels\\)$`));
    }
    expect(isRunning(ready.pid)).toBe(true);
    expect(readGpuUsage(usageDir).get(6)).toBe(mib);
    expect(agent.logs().some((r) => r.shard === 'g-big' && r.msg === 'shard asleep: GPU memory released')).toBe(false);
  });

  it('sleeps an SGLang with room at level 1, then level 2 on the copy it holds; a wake onto its GPU taken is refused naming the pid, the engine asleep and alive', async () => {
    const port = await freePort();
    const ready = await startReady(sleepyStart('g-room', port, 7, 'sglang', 8000));
    for (const level of [1, 2]) {
      const before = released('g-room');
      const asleep = await send('g-room', { case: 'sleep', level }, S.SLEEPING);
      expect(asleep.state, asleep.error).toBe(S.SLEEPING);
      await until(() => released('g-room') > before, 'asleep', 60_000);
      expect(stateFile('g-room').hostCopyMib).toBeGreaterThan(0);
      if (level === 2) break;
      const woken = await send('g-room', { case: 'wake' }, S.READY);
      expect(woken.state, woken.error).toBe(S.READY);
    }
    const pid = squat(7, 76000);
    const refused = await send('g-room', { case: 'wake' }, S.READY);
    expect(refused.state).toBe(S.SLEEPING);
    expect(refused.error).toMatch(new RegExp(`^wake refused: GPU 7 holds 76000 MiB of pid ${pid} \\(train\\.py\\), which no shard owns; `));
    expect(isRunning(ready.pid)).toBe(true);
    unsquat(pid);
    const woken = await send('g-room', { case: 'wake' }, S.READY);
    expect(woken.state, woken.error).toBe(S.READY);
  });
});
