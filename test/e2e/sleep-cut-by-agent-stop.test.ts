import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, type Register, ShardState, type ShardStatus, type StartShard } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { REPO_ROOT } from '../helpers/run-cli.js';
import { fakeGpuUsage, gpuUsageDir, startDoubleAgent } from '../helpers/double-agent.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { runCli, type CliResult } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';

/*
 * A `ctl sleep` or `ctl wake` still waiting on its engine when the agent is
 * stopped (SIGTERM; the admin socket's 200 ms grace is long past): the
 * engine goes on and finishes what it was asked, whatever became of the
 * agent (vLLM runs a utility call once it is on the EngineCore's queue,
 * V:vllm/v1/engine/core.py:1417-1446, 1534-1547 at 2f41c894; SGLang's
 * scheduler its release or resume, S:python/sglang/srt/managers/scheduler_components/weight_updater.py:202-213
 * at 71de97b), and the next agent adopts it. The doubles hold the step
 * (--sim-hold-file, src/sim/sim-hold.ts) until the test lets it go, so the
 * agent stops inside it for certain: the test waits for the double's
 * `.holding` marker, never for a time.
 *
 * The restarted agent must tell each engine as it is, the same process
 * alive: asleep ones SLEEPING (never READY, never judged dead or woken by
 * surprise), a wake that finished while it was down READY once its known
 * answer is given, a level-2 wake cut before its reload still asleep (its
 * weights not back: never READY), one asleep though its file says awake
 * SLEEPING, one busy finishing a wake answered when it is done, and one
 * that dies while it is asked FAILED. Its Register goes out before the
 * engines have answered, with each state file's word; the control plane is
 * told the engine's as soon as it differs (STARTING for one found awake,
 * SLEEPING for one found asleep), and nothing more where the two agree.
 * SGLang answers nothing that says whether its memory is released: its
 * record is its state, and the log and Status's note say so.
 */

const NODE = 'node-cut';
const S = ShardState;
/** MiB each double holds: two level-1 sleeps copy it to host RAM, which the agent checks there is room for. */
const MIB = 2000;

let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
const shards = new Map<string, { port: number; pid: number; gpu: number }>();
/** What each ctl call cut by the stop gave. */
const cut = new Map<string, CliResult>();
/** The first agent's last message, after which the second's begin. */
let firstAgentMessages = 0;

const ctl = (...args: string[]) => runCli(['ctl', ...args, '--socket', dirs.socket]);
const holdFile = (id: string) => join(dirs.root, `hold-${id}`);
const stateFile = (id: string) => JSON.parse(readFileSync(join(dirs.stateDir, 'shards', `${id}.json`), 'utf8')) as { sleepLevel?: number };

function start(id: string, gpu: number, port: number, engine: 'vllm' | 'sglang'): StartShard {
  const spec = doubleStart(engine, id, port, { gpus: [gpu], args: ['--sim-gpu-memory', String(MIB), '--sim-gpu-usage-dir', gpuUsageDir(dirs), '--sim-hold-file', holdFile(id)] });
  if (spec.profile) spec.profile.sleepMode = true;
  return spec;
}

/** Starts `ctl args` with the double of `id` holding `step`; resolves once the step is held (the call waits on it). */
async function heldCall(id: string, step: string, ...args: string[]): Promise<void> {
  writeFileSync(holdFile(id), `${step}\n`);
  const call = ctl(...args);
  void call.then((r) => cut.set(id, r));
  await until(() => existsSync(`${holdFile(id)}.holding`), `${id}'s double to hold ${step}`, 60_000);
}

/** What vLLM's /is_sleeping says: a utility call, so answered only once the step held before it has run. */
async function isSleeping(id: string): Promise<boolean> {
  const res = await fetch(`http://127.0.0.1:${shards.get(id)?.port}/is_sleeping`);
  return ((await res.json()) as { is_sleeping: boolean }).is_sleeping;
}

/** The shards as `ctl status --json` gives them. */
async function ctlStates(): Promise<Record<string, { state: string; pid: number; error: string; note: string }>> {
  const r = await ctl('status', '--json');
  expect(r.exitCode, r.stderr).toBe(0);
  const view = JSON.parse(r.stdout) as { shards: { shardId: string; state: string; pid: number; error: string; note: string }[] };
  return Object.fromEntries(view.shards.map((s) => [s.shardId, s]));
}

/** The statuses of `id` the control plane heard from the second agent, in order. */
function heard(id: string): ShardStatus[] {
  return cp.cp
    .messages(NODE)
    .slice(firstAgentMessages)
    .filter((m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.shardId === id)
    .map((m) => m.msg.value as ShardStatus);
}

/** What the control plane knows of `id` now: its last status from the second agent, else what its Register said. */
function planeState(id: string): ShardState | undefined {
  return heard(id).at(-1)?.state ?? register.runningShards.find((r) => r.shardId === id)?.state;
}

/** What the second agent's Register said of `id`: its state file's word, the engines not yet asked. */
const registered = (id: string) => register.runningShards.find((r) => r.shardId === id)?.state;

/**
 * What the control plane believed of `id` from the second agent, in order,
 * each change once: its Register's word, then each status. Register goes
 * out while the adoptions settle: with the state file's word for an engine
 * not yet answered (f's answer is held until Register has come), or with
 * the engine's for one that answered first.
 */
function planeSaw(id: string): ShardState[] {
  const seq = [registered(id), ...heard(id).map((s) => s.state)].filter((st) => st !== undefined);
  return seq.filter((st, i) => i === 0 || st !== seq[i - 1]);
}

/** States the second agent moved `id` to, from its log. */
const movedTo = (id: string) => agent.logs().filter((r) => r.msg === 'shard state changed' && r.shard === id).map((r) => r.to);

let register: Register;

/**
 * The fake box with all eight GPUs free (the data set's GPUs 3 and 4 are
 * busy, which the agent refuses a start on), for the agent's nvidia-smi:
 * one engine a GPU, so that each sleep is judged by its own GPU's memory.
 */
function freeBox(d: AgentDirs): Record<string, string> {
  const box = join(d.root, 'gpus');
  cpSync(join(REPO_ROOT, 'fixtures/gpu/hgx-h100x8'), box, { recursive: true });
  const csv = join(box, 'query-gpu.csv');
  writeFileSync(csv, readFileSync(csv, 'utf8').replace(/, 71480 MiB, (.*), 97 %/g, ', 0 MiB, $1, 0 %'));
  return { ...fakeGpuUsage(d), LLMGW_FAKE_GPUS: box };
}

beforeAll(async () => {
  ({ cp, agent, dirs } = await startDoubleAgent(NODE, 'llmgw-sleep-cut-', [], freeBox));
  const plan: [string, number, 'vllm' | 'sglang'][] = [
    ['a', 0, 'vllm'], // its sleep cut: asleep by record, asleep
    ['b', 1, 'vllm'], // its level-1 wake cut: asleep by record, awake
    ['c', 2, 'vllm'], // its level-2 wake cut before the reload: asleep by record, weights mapped but not loaded
    ['d', 3, 'vllm'], // put to sleep while no agent ran: awake by record, asleep
    ['e', 4, 'vllm'], // its wake still running when the next agent asks, and then it dies
    ['f', 5, 'vllm'], // its wake still running when the next agent asks: /is_sleeping answers late
    ['g', 6, 'sglang'], // its release cut
    ['h', 7, 'sglang'], // its resume cut
  ];
  const ready = await Promise.all(
    plan.map(async ([id, gpu, engine]) => {
      const port = await freePort();
      const got = cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED), 60_000);
      cp.cp.send(NODE, { case: 'start', value: start(id, gpu, port, engine) });
      const st = (await got).msg.value as ShardStatus;
      expect(st.state, `${id}: ${st.error}`).toBe(S.READY);
      shards.set(id, { port, pid: st.pid, gpu });
      return st;
    }),
  );
  expect(ready).toHaveLength(plan.length);
  // Asleep before the stop: the shards whose wake is cut.
  for (const [id, level] of [['b', '1'], ['c', '2'], ['e', '1'], ['f', '1'], ['h', '1']] as const) {
    const r = await ctl('sleep', id, '--level', level);
    expect(r.exitCode, `${id}: ${r.stderr}`).toBe(0);
  }

  await heldCall('a', 'sleep', 'sleep', 'a', '--level', '1');
  await heldCall('b', 'wake_up', 'wake', 'b');
  // The first of a level-2 wake's three calls (wake_up?tags=weights): the reload is never asked.
  await heldCall('c', 'wake_up', 'wake', 'c');
  await heldCall('e', 'wake_up', 'wake', 'e');
  await heldCall('f', 'wake_up', 'wake', 'f');
  await heldCall('g', 'release_memory_occupation', 'sleep', 'g', '--level', '1');
  await heldCall('h', 'resume_memory_occupation', 'wake', 'h');

  // process.kill, not agent.kill: execa follows SIGTERM with SIGKILL 5 s later, which would be another test.
  process.kill(agent.pid, 'SIGTERM');
  expect((await agent.exited).exitCode).toBe(0);
  await until(() => cut.size === 7, 'the cut ctl calls to end', 30_000);
  firstAgentMessages = cp.cp.messages(NODE).length;

  // While no agent runs: the held steps finish, as the engines would, and one more is put to sleep.
  for (const id of ['a', 'b', 'c', 'g', 'h']) writeFileSync(holdFile(id), '');
  expect(await isSleeping('a')).toBe(true);
  expect(await isSleeping('b')).toBe(false);
  // Its weights tag is back (fresh memory, the reload never asked), its KV cache still asleep (V:vllm/v1/executor/abstract.py:361-367).
  expect(await isSleeping('c')).toBe(true);
  // SGLang's steps, seen in the memory the fake nvidia-smi shows: g released, h resumed.
  await until(() => (readGpuUsage(gpuUsageDir(dirs)).get(6) ?? MIB) < MIB / 2, 'g to release its memory', 30_000);
  await until(() => readGpuUsage(gpuUsageDir(dirs)).get(7) === MIB, 'h to take its memory back', 30_000);
  const slept = await fetch(`http://127.0.0.1:${shards.get('d')?.port}/sleep?level=1`, { method: 'POST' });
  expect(slept.status).toBe(200);

  const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
  agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { ...fakeGpuUsage(dirs), LLMGW_FAKE_GPUS: join(dirs.root, 'gpus') } });
  register = (await registered).msg.value as Register;
  // e's and f's wakes still run: the agent's question waits behind them. Once asked (or, on a build that never asks,
  // after a while) f's wake ends, and e dies.
  const second = agent;
  const asked = (id: string) => second.logs().some((r) => r.msg === 'asking the adopted engine whether it sleeps' && r.shard === id);
  await until(() => asked('e') && asked('f'), 'the agent to ask e and f', 20_000).catch(() => undefined);
  writeFileSync(holdFile('f'), '');
  const e = shards.get('e')?.pid as number;
  process.kill(-e, 'SIGKILL');
  await until(() => !isRunning(e), 'engine e to be gone', 30_000);
  for (const id of ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']) {
    await until(() => movedTo(id).some((to) => to === 'SLEEPING' || to === 'READY' || to === 'FAILED'), `${id} to settle`, 60_000);
  }
}, 240_000); // eight engines, two agents and a dozen ctl runs: a safety net for a loaded machine, not a speed bound

afterAll(() => endAgentFixture({ agent, cp, dirs }));

describe('an agent stopped while a ctl sleep or wake waited on its engine, then restarted', () => {
  it('told each cut ctl call the agent went away before it answered, never that it was done', () => {
    for (const [id, r] of cut) {
      // Exit 69, and told that it may or may not have been done: not "not running", which reads as nothing done.
      expect(r.exitCode, `${id}: ${r.stdout}${r.stderr}`).toBe(69);
      expect(r.stderr, id).toMatch(/went away before it answered (Sleep|Wake): it may or may not have been done/);
      expect(r.stdout, id).toBe('');
    }
  });

  it('adopts every engine, the same process, alive, none killed', () => {
    const running = Object.fromEntries(register.runningShards.map((s) => [s.shardId, s.pid]));
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']) expect(running[id], id).toBe(shards.get(id)?.pid);
    for (const id of ['a', 'b', 'c', 'd', 'f', 'g', 'h']) expect(isRunning(shards.get(id)?.pid as number), id).toBe(true);
    expect(agent.logs().some((r) => /killing/.test(String(r.msg)))).toBe(false);
  });

  it('an engine that dies while the agent waits for its answer: FAILED for its death, never SLEEPING or READY', async () => {
    expect(movedTo('e').slice(0, 2)).toEqual(['STARTING', 'FAILED']);
    expect(planeState('e')).toBe(S.FAILED);
    expect(heard('e').at(-1)?.error).toMatch(/SIGKILL|signal 9|exit/i);
  });

  it('a sleep cut by the stop: SLEEPING, never READY, and its wake brings it back', async () => {
    expect(movedTo('a')).not.toContain('READY');
    // The engine's word is the file's: nothing to correct, never STARTING on the wire.
    expect(planeSaw('a')).toEqual([S.SLEEPING]);
    expect((await ctlStates()).a).toMatchObject({ state: 'SHARD_STATE_SLEEPING', note: '' });
    expect(planeState('a')).toBe(S.SLEEPING);
    expect(stateFile('a').sleepLevel).toBe(1);
    expect(await isSleeping('a')).toBe(true);
    const r = await ctl('wake', 'a');
    expect(r.exitCode, r.stderr).toBe(0);
    expect(await consumeStream(await streamChat(shards.get('a')?.port as number, 2))).toEqual({ tokens: 2, done: true });
  });

  it('a level-1 wake that finished after the stop: READY with its known answer, recorded awake, never SLEEPING after the adoption', async () => {
    expect(movedTo('b').slice(0, 2)).toEqual(['STARTING', 'READY']);
    // SLEEPING by its file until the engine said awake, then STARTING told before its known answer made it READY.
    expect([[S.SLEEPING, S.STARTING, S.READY], [S.STARTING, S.READY]]).toContainEqual(planeSaw('b'));
    const st = (await ctlStates()).b;
    expect(st?.state, st?.error).toBe('SHARD_STATE_READY');
    expect(planeState('b')).toBe(S.READY);
    expect(stateFile('b').sleepLevel).toBeUndefined();
    const why = agent.logs().find((r) => r.shard === 'b' && r.to === 'READY')?.why;
    expect(String(why)).toMatch(/woken while the agent was down: gives its known answer/);
  });

  it('a level-2 wake cut before its reload: still SLEEPING (its weights are not back), and its wake reloads them', async () => {
    expect(movedTo('c')).not.toContain('READY');
    expect(planeSaw('c')).toEqual([S.SLEEPING]);
    expect((await ctlStates()).c?.state).toBe('SHARD_STATE_SLEEPING');
    expect(planeState('c')).toBe(S.SLEEPING);
    expect(stateFile('c').sleepLevel).toBe(2);
    const r = await ctl('wake', 'c', '--json');
    expect(r.exitCode, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { shard: { state: string } }).shard.state).toBe('SHARD_STATE_READY');
    expect(await isSleeping('c')).toBe(false);
  });

  it('an engine asleep though its state file says awake: SLEEPING at the level it reports, recorded, never READY or UNHEALTHY', async () => {
    expect(movedTo('d').slice(0, 2)).toEqual(['STARTING', 'SLEEPING']);
    expect((await ctlStates()).d?.state).toBe('SHARD_STATE_SLEEPING');
    expect(planeState('d')).toBe(S.SLEEPING);
    expect(stateFile('d').sleepLevel).toBe(1);
    expect(heard('d').map((s) => s.state)).not.toContain(S.READY);
    // STARTING by its file until the engine said asleep, then SLEEPING, and nothing else after.
    expect([[S.STARTING, S.SLEEPING], [S.SLEEPING]]).toContainEqual(planeSaw('d'));
    const r = await ctl('wake', 'd');
    expect(r.exitCode, r.stderr).toBe(0);
    expect(await isSleeping('d')).toBe(false);
  });

  it('an engine still busy waking when asked: not judged dead, READY once its wake is done', async () => {
    expect(movedTo('f').slice(0, 2)).toEqual(['STARTING', 'READY']);
    expect(agent.logs().some((r) => r.msg === 'asking the adopted engine whether it sleeps' && r.shard === 'f')).toBe(true);
    // Its late answer came after Register: SLEEPING (the file's word) until it came, then STARTING told at once, then READY.
    expect(planeSaw('f')).toEqual([S.SLEEPING, S.STARTING, S.READY]);
    expect((await ctlStates()).f?.state).toBe('SHARD_STATE_READY');
    expect(planeState('f')).toBe(S.READY);
    expect(stateFile('f').sleepLevel).toBeUndefined();
  });

  it('SGLang, whose state the agent reads from its record: a cut release and a cut resume are SLEEPING, and each wakes READY on the same engine', async () => {
    const states = await ctlStates();
    for (const id of ['g', 'h']) {
      expect(movedTo(id).slice(0, 2), id).toEqual(['STARTING', 'SLEEPING']);
      // Not asked (it has nothing to answer): the file's word on the wire, in the log and in Status's note.
      expect(planeSaw(id), id).toEqual([S.SLEEPING]);
      expect(agent.logs().some((r) => r.msg === 'asking the adopted engine whether it sleeps' && r.shard === id), id).toBe(false);
      const why = agent.logs().find((r) => r.msg === 'adopted engine: sleep taken from its state file' && r.shard === id)?.why;
      expect(why, id).toBe('sglang answers nothing that says whether its memory is released');
      expect(states[id]?.note, id).toBe('asleep at level 1 by its state file only: sglang answers nothing that says whether its memory is released');
      const r = await ctl('wake', id);
      expect(r.exitCode, `${id}: ${r.stderr}`).toBe(0);
      expect(isRunning(shards.get(id)?.pid as number), id).toBe(true);
      expect(await consumeStream(await streamChat(shards.get(id)?.port as number, 2)), id).toEqual({ tokens: 2, done: true });
      // Woken by this agent: its state is the agent's own word again.
      expect((await ctlStates())[id]?.note, id).toBe('');
    }
  });
});
