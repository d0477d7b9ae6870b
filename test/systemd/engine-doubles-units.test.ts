import { endLabFile } from '../helpers/end-lab-file.js';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, SleepShardSchema, type StartShard, StartShardSchema, StopShardSchema, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { type AgentDirs, agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, consumeStream } from '../helpers/fake-engines.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, type SystemdLab, agentLogDropIn, bootLab, installAgentUnit, labUnavailableReason, } from '../helpers/systemd-lab.js';

/*
 * The engine doubles (bin/fake-vllm, bin/fake-sglang: vLLM's and SGLang's own
 * command lines, their workers' and schedulers' signal handling as their
 * source has it) as the agent's vllm and sglang engines, each in its
 * transient unit under a real systemd: the lab's, PID 1 of its own pid,
 * mount and cgroup namespaces (test/helpers/systemd-lab-boot.sh). The agent
 * runs as the packaged unit with launcher auto, so it picks systemd-run.
 * A stop that SIGTERMs the unit's whole cgroup (what KillMode=control-group
 * did) kills vLLM's TP workers and SGLang's schedulers under the draining
 * engine and cuts every in-flight request (engine-fidelity review §0 #2);
 * these tests stream through a StopShard to prove it goes to the main
 * process only. The lab shares the host's network namespace, so the test
 * reaches an engine on 127.0.0.1. The agent reports the lab's pids; a unit's
 * cgroup, read on the host, lists host pids. The direct launcher's
 * counterpart is test/e2e/engine-doubles.test.ts; what does not depend on
 * the launcher (SGLang kept READY by 500 ms probes of its 1 s
 * /health_generate) is proven there alone.
 */

const NODE = 'node-dd';
const S = ShardState;
const unitOf = (id: string) => `llmgw-shard-${id}.service`;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
const unavailable = await labUnavailableReason();

/**
 * 10 s, not the test config's 3 s: SGLang's drain loop sleeps 5 s before its
 * first look for requests left (tokenizer_manager.py:3114-3158), so a
 * shorter grace SIGKILLs every SGLang stop. vLLM is then told
 * --shutdown-timeout 8.
 */
const STOP_GRACE = '10s';

/** Where systemd keeps unit cgroups on this host, looked up as the agent does (src/lib/systemd/unit-cgroup-procs.ts). */
const CGROUP_ROOT = ['/sys/fs/cgroup', '/sys/fs/cgroup/unified', '/sys/fs/cgroup/systemd'].find((r) => existsSync(join(r, 'cgroup.procs')));

/** The engines block of the brief: the agent's own vllm and sglang argv, run by the doubles. */
const ENGINES_YAML = ['engines:', '  vllm:', `    command: [${FAKE_VLLM}, serve]`, '    allow_sleep_mode: true', '  sglang:', `    command: [${FAKE_SGLANG}, serve]`, ''].join('\n');

interface Fixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  root: string;
  dirs: AgentDirs;
}
let f: Fixture;

function configYaml(cpUrl: string, dirs: AgentDirs): string {
  // No launcher line: the default, auto, picks systemd-run under the lab's systemd.
  const yaml = agentConfigYaml({ server: cpUrl, dirs, nodeId: NODE, extraYaml: ENGINES_YAML });
  if (!yaml.includes('\n  stop_grace: 3s\n')) throw new Error('agentConfigYaml no longer sets stop_grace: 3s; update configYaml');
  return yaml.replace('\n  stop_grace: 3s\n', `\n  stop_grace: ${STOP_GRACE}\n`);
}

/** A StartShard of the vllm or sglang engine serving org/m as 'm' on `port`, one tensor-parallel rank per GPU. */
function doubleStart(engine: 'vllm' | 'sglang', shardId: string, port: number, gpus: number[], args: string[]): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    rank: 0,
    nnodes: 1,
    gpuIndices: gpus,
    httpPort: port,
    profile: { name: `${engine}-double`, engine, model: 'org/m', servedModelName: 'm', tensorParallelSize: gpus.length, args },
  });
}

function agentLog(): string {
  return fullAgentLog().split('\n').slice(-30).join('\n');
}

/** Whether the agent has logged shard `id` asleep with its GPU memory released: the sleep is done (SLEEPING is reported when it begins). */
function released(id: string): boolean {
  return fullAgentLog()
    .split('\n')
    .some((l) => l.includes(`"shard":"${id}"`) && l.includes('shard asleep: GPU memory released'));
}

function fullAgentLog(): string {
  try {
    return readFileSync(join(f.root, 'agent.log'), 'utf8');
  } catch {
    return '(no agent log)';
  }
}

const usageDir = (root: string) => join(root, 'gpu-usage');

const shardLog = (id: string) => readFileSync(join(f.dirs.logDir, 'shards', `${id}.log`), 'utf8');

/** What the agent reported of shard `id` so far, in order. */
const statesOf = (id: string) =>
  f.cp.cp
    .messages(NODE)
    .filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === id)
    .map((m) => S[statusOf(m).state]);

async function startShard(spec: StartShard): Promise<ShardStatus> {
  const settled = f.cp.cp.waitFor(NODE, shardIs(spec.shardId, S.READY, S.FAILED, S.EXITED), 30_000);
  f.cp.cp.send(NODE, { case: 'start', value: spec });
  const st = statusOf(await settled);
  expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
  return st;
}

/** Sends StopShard; resolves with the shard's STOPPED or FAILED status and when it arrived. */
async function stopShard(id: string): Promise<{ status: ShardStatus; atMs: number }> {
  const ended = f.cp.cp.waitFor(NODE, shardIs(id, S.STOPPED, S.FAILED), 30_000);
  f.cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  const status = statusOf(await ended);
  return { status, atMs: Date.now() };
}

/**
 * The pids in a unit's cgroup, read on the host (the lab's ControlGroup is
 * the host's path), so they are host pids, not the lab's; [] once systemd
 * removed the cgroup.
 */
function cgroupProcs(controlGroup: string): number[] {
  if (!CGROUP_ROOT) throw new Error('no cgroup hierarchy with cgroup.procs on this host');
  const file = join(CGROUP_ROOT, controlGroup, 'cgroup.procs');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
}

/** Whether host pid `pid` runs (a zombie does not). */
function hostAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

/** POSTs a streamed completion of exactly `maxTokens` to the engine on `port`. */
function streamCompletion(port: number, maxTokens: number): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'hi', max_tokens: maxTokens, stream: true }),
  });
}

/**
 * Starts a streamed completion of `tokens` on a READY shard, sends StopShard
 * once a few tokens are in, and returns what the client got, how many tokens
 * it had when the stop was sent, and the unit's pids and cgroup as they were
 * before it.
 */
async function streamThroughStop(id: string, port: number, tokens: number) {
  const unit = unitOf(id);
  const controlGroup = await f.lab.show(unit, 'ControlGroup');
  const before = cgroupProcs(controlGroup);
  expect(before.filter(hostAlive)).toEqual(before);
  const res = await streamCompletion(port, tokens);
  expect(res.status).toBe(200);
  let seen = 0;
  let fifth: () => void = () => {};
  const fifthToken = new Promise<void>((r) => {
    fifth = r;
  });
  const stream = consumeStream(res, (n) => {
    seen = n;
    if (n === 5) fifth();
  }).then((got) => ({ ...got, atMs: Date.now() }));
  // A stream that ends short of five tokens fails below rather than hanging here.
  void stream.then(fifth);
  await fifthToken;
  const tokensAtStop = seen;
  const stopped = stopShard(id);
  stopped.catch(() => {});
  const got = await stream;
  const { status, atMs: stoppedAtMs } = await stopped;
  return { got, tokensAtStop, status, stoppedAtMs, controlGroup, before };
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `vLLM and SGLang doubles in transient units under a real systemd (skipped: ${unavailable})` : 'vLLM and SGLang doubles in transient units under a real systemd',
  { timeout: 40_000 },
  () => {
    beforeAll(async () => {
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sddoubles-'));
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') });
      const cp = await startControlPlane();
      const dirs = agentDirs(root);
      f = { lab, cp, root, dirs };
      const configPath = join(root, 'agent.yaml');
      writeFileSync(configPath, configYaml(cp.url, dirs));
      // What the doubles hold on their GPUs, where the agent's nvidia-smi sees it (the sleep test).
      const dropIn = `${agentLogDropIn(join(root, 'agent.log'))}Environment=LLMGW_FAKE_GPU_USAGE_DIR=${usageDir(root)}\n`;
      const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode).toBe(0);
      const registered = f.cp.cp.waitFor(NODE, isRegister, 30_000);
      registered.catch(() => {});
      const r = await lab.run(['systemctl', 'start', AGENT_UNIT], { timeoutMs: 60_000 });
      expect(r.exitCode, `${String(r.stderr)}\n${agentLog()}`).toBe(0);
      await registered;
    }, 60_000);

    afterAll(() => endLabFile(f));

    it('a StopShard to a TP=2 vLLM shard in its unit lets a streamed completion send every token and [DONE], then reports STOPPED, with nothing left in the cgroup and the unit unloaded', async () => {
      const port = await freePort();
      const ready = await startShard(doubleStart('vllm', 'dv1', port, [freeFakeGpu(0), freeFakeGpu(1)], ['--sim-token-latency', '50ms']));
      expect(await f.lab.show(unitOf('dv1'), 'MainPID')).toBe(String(ready.pid));
      const run = await streamThroughStop('dv1', port, 40);
      // The engine and its two TP workers were in the unit: what a SIGTERM to the cgroup reached.
      expect(run.before).toHaveLength(3);
      expect(run.tokensAtStop).toBeLessThan(40);
      expect(run.got, shardLog('dv1')).toMatchObject({ tokens: 40, done: true });
      expect(S[run.status.state], `${run.status.error}\n${agentLog()}`).toBe('STOPPED');
      // The engine drained, exited, and only then was the shard STOPPED.
      expect(run.stoppedAtMs).toBeGreaterThanOrEqual(run.got.atMs);
      const log = shardLog('dv1');
      expect(log).toContain('Received SIGTERM, shutting down: mode=drain timeout=8s');
      expect(log).not.toContain('died unexpectedly');
      expect(statesOf('dv1')).not.toContain('FAILED');
      expect(cgroupProcs(run.controlGroup)).toEqual([]);
      for (const pid of run.before) expect(hostAlive(pid), `host pid ${pid} of the unit still runs`).toBe(false);
      expect(await f.lab.show(unitOf('dv1'), 'LoadState')).toBe('not-found');
    });

    it('a StopShard to a DP=2 vLLM shard in its unit lets a streamed completion send every token and [DONE]: the agent runs one API server, where vLLM\'s default of one per DP rank cuts the stream (review engine-fidelity-2 §3 N2)', async () => {
      const port = await freePort();
      const spec = doubleStart('vllm', 'dp1', port, [freeFakeGpu(0), freeFakeGpu(1)], ['--data-parallel-size', '2', '--sim-token-latency', '50ms']);
      if (spec.profile) spec.profile.tensorParallelSize = 1;
      await startShard(spec);
      const run = await streamThroughStop('dp1', port, 40);
      expect(run.before).toHaveLength(3); // the engine and one worker per DP rank
      expect(run.tokensAtStop).toBeLessThan(40);
      expect(run.got, shardLog('dp1')).toMatchObject({ tokens: 40, done: true });
      expect(S[run.status.state], `${run.status.error}\n${agentLog()}`).toBe('STOPPED');
      expect(shardLog('dp1')).toContain('Received SIGTERM, shutting down: mode=drain timeout=8s');
      expect(cgroupProcs(run.controlGroup)).toEqual([]);
    });

    it('a StopShard to a TP=2 SGLang shard in its unit waits out its 5 s drain poll: the streamed completion sends every token and [DONE], then STOPPED, with nothing left in the cgroup and the unit unloaded', async () => {
      const port = await freePort();
      // The default drain poll (5 s): no --sim-drain-poll.
      const ready = await startShard(doubleStart('sglang', 'dg1', port, [freeFakeGpu(2), freeFakeGpu(3)], ['--sim-token-latency', '50ms']));
      expect(await f.lab.show(unitOf('dg1'), 'MainPID')).toBe(String(ready.pid));
      const t0 = Date.now();
      const run = await streamThroughStop('dg1', port, 40);
      // The server, two schedulers (no SIGTERM handler: a SIGTERM kills them) and the detokenizer.
      expect(run.before).toHaveLength(4);
      expect(run.tokensAtStop).toBeLessThan(40);
      expect(run.got, shardLog('dg1')).toMatchObject({ tokens: 40, done: true });
      expect(S[run.status.state], `${run.status.error}\n${agentLog()}`).toBe('STOPPED');
      expect(run.stoppedAtMs).toBeGreaterThanOrEqual(run.got.atMs);
      // Its drain loop's first look came 5 s after the SIGTERM, inside stop_grace: no SIGKILL cut it short.
      expect(run.stoppedAtMs - t0).toBeGreaterThanOrEqual(5000);
      const log = shardLog('dg1');
      expect(log).toContain('Received SIGTERM; gracefully exiting');
      expect(log).toContain('phase draining -> exiting: drained');
      expect(log).not.toContain('exited unexpectedly');
      expect(statesOf('dg1')).not.toContain('FAILED');
      expect(cgroupProcs(run.controlGroup)).toEqual([]);
      for (const pid of run.before) expect(hostAlive(pid), `host pid ${pid} of the unit still runs`).toBe(false);
      expect(await f.lab.show(unitOf('dg1'), 'LoadState')).toBe('not-found');
    });

    it('sleeps a vLLM shard in its unit at level 1 then 2 (the sleep flags and dev-mode env reach the unit), sees its GPU memory released, and wakes it READY each time only once it gives its known answer', async () => {
      const port = await freePort();
      const gpu = freeFakeGpu(5);
      const spec = doubleStart('vllm', 'dv2', port, [gpu], ['--sim-gpu-memory', '8000', '--sim-gpu-usage-dir', usageDir(f.root)]);
      if (spec.profile) spec.profile.sleepMode = true;
      await startShard(spec);
      expect(readGpuUsage(usageDir(f.root)).get(gpu)).toBe(8000);
      const send = async (msg: 'sleep' | 'wake', state: ShardState, level = 1) => {
        const got = f.cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'dv2' && (m.msg.value.state === state || m.msg.value.error !== ''), 30_000);
        if (msg === 'sleep') f.cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: 'dv2', level }) });
        else f.cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: 'dv2' }) });
        return statusOf(await got);
      };
      const count = (text: string) => fullAgentLog().split(text).length - 1;
      for (const level of [1, 2]) {
        const released = count('shard asleep: GPU memory released');
        const sleeping = await send('sleep', S.SLEEPING, level);
        expect(S[sleeping.state], `${sleeping.error}\n${agentLog()}`).toBe('SLEEPING');
        await until(() => count('shard asleep: GPU memory released') > released, `dv2 seen asleep at level ${level}`, 30_000);
        // vLLM answers /sleep 200 without --enable-sleep-mode too, and frees nothing (review engine-fidelity-2 §3 N10):
        // the memory released and the double's own line show the flag reached the unit; the dev-mode routes answering, the env.
        expect(readGpuUsage(usageDir(f.root)).get(gpu)).toBeLessThan(8000 / 2);
        expect(shardLog('dv2')).toMatch(/Sleep mode enabled/);
        const proved = count('gives its known answer');
        const woken = await send('wake', S.READY);
        expect(S[woken.state], `${woken.error}\n${agentLog()}`).toBe('READY');
        expect(count('gives its known answer')).toBeGreaterThan(proved);
        expect(readGpuUsage(usageDir(f.root)).get(gpu)).toBe(8000);
      }
      // Level 2 woke through reload_weights: the double answers its words, not the '!' of weights it lost.
      const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: 'hi', max_tokens: 3, temperature: 0 }),
      });
      expect(((await res.json()) as { choices: { text: string }[] }).choices[0]?.text).not.toMatch(/!/);
      expect(shardLog('dv2')).toMatch(/Reloading weights inplace/);
      expect(statesOf('dv2')).not.toContain('FAILED');
      expect(S[(await stopShard('dv2')).status.state]).toBe('STOPPED');
    });

    it('reports a vLLM shard in its unit whose wake loses the weights FAILED "woke without its weights", never READY, and leaves its unit running for the control plane', async () => {
      const port = await freePort();
      const gpu = freeFakeGpu(6);
      const spec = doubleStart('vllm', 'dv3', port, [gpu], ['--sim-gpu-memory', '8000', '--sim-gpu-usage-dir', usageDir(f.root), '--sim-wake-loses-weights']);
      if (spec.profile) spec.profile.sleepMode = true;
      await startShard(spec);
      await until(() => fullAgentLog().includes('"shard":"dv3"') && /known answer recorded[^\n]*"shard":"dv3"|"shard":"dv3"[^\n]*known answer recorded/.test(fullAgentLog()), 'dv3 known answer recorded', 30_000);
      const asleep = f.cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'dv3' && (m.msg.value.state === S.SLEEPING || m.msg.value.error !== ''), 30_000);
      f.cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: 'dv3', level: 1 }) });
      const slept = statusOf(await asleep);
      expect(S[slept.state], `${slept.error}\n${agentLog()}`).toBe('SLEEPING');
      await until(() => released('dv3'), 'dv3 seen asleep', 30_000);
      const woken = f.cp.cp.waitFor(NODE, shardIs('dv3', S.READY, S.FAILED), 30_000);
      f.cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: 'dv3' }) });
      const st = statusOf(await woken);
      expect(S[st.state], agentLog()).toBe('FAILED');
      expect(st.error).toMatch(/^woke without its weights: it answers "!+"/);
      expect(statesOf('dv3').slice(statesOf('dv3').indexOf('SLEEPING'))).not.toContain('READY');
      expect(await f.lab.show(unitOf('dv3'), 'ActiveState')).toBe('active');
      expect(S[(await stopShard('dv3')).status.state]).toBe('STOPPED');
    });

    it('an SGLang shard asleep in its unit stays SLEEPING across a kill -9 of the agent (Restart=always brings it back), and wakes READY with its known answer', async () => {
      const port = await freePort();
      const gpu = freeFakeGpu(7);
      const spec = doubleStart('sglang', 'dg3', port, [gpu], ['--sim-gpu-memory', '8000', '--sim-gpu-usage-dir', usageDir(f.root), '--sim-drain-poll', '500ms']);
      if (spec.profile) spec.profile.sleepMode = true;
      const ready = await startShard(spec);
      await until(() => /known answer recorded[^\n]*"shard":"dg3"|"shard":"dg3"[^\n]*known answer recorded/.test(fullAgentLog()), 'dg3 known answer recorded', 30_000);
      const asleep = f.cp.cp.waitFor(NODE, shardIs('dg3', S.SLEEPING, S.FAILED), 30_000);
      f.cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: 'dg3', level: 2 }) });
      expect(S[statusOf(await asleep).state]).toBe('SLEEPING');
      await until(() => released('dg3'), 'dg3 seen asleep', 30_000);
      const crashed = await f.lab.show(AGENT_UNIT, 'MainPID');
      const restarts = Number(await f.lab.show(AGENT_UNIT, 'NRestarts'));
      const registered = f.cp.cp.waitFor(NODE, (m) => isRegister(m) && (m.msg.value as { runningShards: { shardId: string }[] }).runningShards.some((r) => r.shardId === 'dg3'), 60_000);
      registered.catch(() => {});
      expect((await f.lab.run(['kill', '-KILL', crashed])).exitCode).toBe(0);
      await f.lab.waitShow(AGENT_UNIT, 'NRestarts', (v) => Number(v) > restarts, 30_000);
      const reg = (await registered).msg.value as { runningShards: { shardId: string; state: ShardState }[] };
      expect(S[reg.runningShards.find((r) => r.shardId === 'dg3')?.state ?? S.UNSPECIFIED]).toBe('SLEEPING');
      const settled = (text: string) => fullAgentLog().split('\n').some((l) => l.includes('"shard":"dg3"') && l.includes(text));
      await until(() => settled('"to":"SLEEPING"'), 'the adopted dg3 to settle SLEEPING', 60_000);
      const woken = f.cp.cp.waitFor(NODE, shardIs('dg3', S.READY, S.FAILED), 30_000);
      f.cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: 'dg3' }) });
      const st = statusOf(await woken);
      expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
      expect(st.pid).toBe(ready.pid);
      expect(settled('gives its known answer')).toBe(true);
      expect(statesOf('dg3')).not.toContain('FAILED');
      expect(S[(await stopShard('dg3')).status.state]).toBe('STOPPED');
    }, 120_000);

    it("places a multi-node vLLM rank's unit on its GPU's CPUs and NUMA node (CPUAffinity=, NUMAPolicy=bind), and systemd runs it so", async () => {
      const gpu = freeFakeGpu(0);
      const spec = doubleStart('vllm', 'dn1', await freePort(), [gpu], []);
      Object.assign(spec, { rank: 1, nnodes: 2, leaderAddr: '127.0.0.1', leaderPort: await freePort() });
      if (spec.profile) spec.profile.tensorParallelSize = 2;
      await startShard(spec);
      // The fixture's GPUs 0-3 sit on NUMA node 0 with CPUs 0-55,112-167: those online here, as systemd holds them.
      const online = readFileSync('/sys/devices/system/cpu/online', 'utf8').trim();
      expect(gpu).toBeLessThan(4);
      const affinity = await f.lab.show(unitOf('dn1'), 'CPUAffinity');
      expect(affinity.replace(/ /g, ',')).not.toBe('');
      expect(await f.lab.show(unitOf('dn1'), 'NUMAPolicy')).toBe('bind');
      expect(await f.lab.show(unitOf('dn1'), 'NUMAMask')).toBe('0');
      const procs = cgroupProcs(await f.lab.show(unitOf('dn1'), 'ControlGroup'));
      expect(procs.length).toBeGreaterThan(0);
      for (const pid of procs.filter(hostAlive)) expect(readFileSync(`/proc/${pid}/status`, 'utf8')).toContain(`Cpus_allowed_list:\t${online}\n`);
      expect(S[(await stopShard('dn1')).status.state]).toBe('STOPPED');
    });
  },
);
