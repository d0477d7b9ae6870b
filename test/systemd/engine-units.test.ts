import { endLabFile } from '../helpers/end-lab-file.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { type AgentMessage, type Register, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { ShardInfoJson, StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';
import { agentConfigYaml, agentDirs, type AgentDirs } from '../helpers/agent-config-yaml.js';
import { freePort, } from '../helpers/engine-processes.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, agentLogDropIn, installAgentUnit, bootLab, labUnavailableReason, type SystemdLab } from '../helpers/systemd-lab.js';

/*
 * Engines in their own transient units (supervisor.launcher: auto, the default), under a real
 * systemd: the lab's, PID 1 of its own namespaces (test/helpers/systemd-lab-boot.sh). The agent
 * runs as the packaged unit, so it calls systemd-run and systemctl exactly as on a node. One lab,
 * control plane and agent for the whole file; each test starts shards of its own. Pids below are
 * the lab's pid namespace's, as the agent reports them; `lab.run` acts inside it.
 */

const AGENT = AGENT_UNIT;
const NODE = 'node-u';
const S = ShardState;
const unitOf = (id: string) => `llmgw-shard-${id}.service`;
const unavailable = await labUnavailableReason();

interface Fixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  root: string;
  dirs: AgentDirs;
  configPath: string;
}
let f: Fixture;

function configYaml(cpUrl: string, dirs: AgentDirs, launcher?: 'direct'): string {
  const yaml = agentConfigYaml({ server: cpUrl, dirs, nodeId: NODE, extraYaml: ['engines:', '  sim:', '    env: {}', '    extra_args: []'].join('\n') });
  // No launcher line by default: what the lab proves is the default, auto. Resource properties as an operator would set them.
  const unitProperties = '  unit_properties:\n    CPUWeight: "150"\n    TasksMax: "512"\n';
  return yaml.replace('\nsupervisor:\n', `\nsupervisor:\n${launcher ? `  launcher: ${launcher}\n` : ''}${unitProperties}`);
}

/** A wait set up before the event it waits for; marked handled so a test failing earlier leaves no unhandled rejection. */
function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

async function systemctl(...args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const r = await f.lab.run(['systemctl', ...args], { timeoutMs: 60_000 });
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

async function startAgent(): Promise<AgentMessage> {
  const registered = later(f.cp.cp.waitFor(NODE, isRegister, 30_000));
  const r = await systemctl('start', AGENT);
  expect(r.exitCode, `${r.stderr}\n${agentLog()}`).toBe(0);
  return registered;
}

function agentLog(): string {
  try {
    return readFileSync(join(f.root, 'agent.log'), 'utf8').split('\n').slice(-30).join('\n');
  } catch {
    return '(no agent log)';
  }
}

/** A GPU of the fake 8 a start is not refused on (FREE_FAKE_GPUS in test/helpers/fake-gpus.ts) for each shard id, so that shards of different tests never ask for the same one. */
const gpus = new Map<string, number>();

/** Starts sim shard `id` and waits for READY. */
async function startShard(id: string, args: string[] = ['--load-time', '200ms']): Promise<{ pid: number; port: number }> {
  const port = await freePort();
  if (!gpus.has(id)) gpus.set(id, freeFakeGpu(gpus.size));
  const ready = f.cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 30_000);
  f.cp.cp.send(NODE, { case: 'start', value: simStart(id, port, { args, gpu: gpus.get(id) }) });
  const st = (await ready).msg.value as ShardStatus;
  expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
  return { pid: st.pid, port };
}

async function stopShard(id: string): Promise<ShardStatus> {
  const stopped = f.cp.cp.waitFor(NODE, shardIs(id, S.STOPPED, S.FAILED), 30_000);
  f.cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
  return (await stopped).msg.value as ShardStatus;
}

async function ctlShard(id: string): Promise<ShardInfoJson | undefined> {
  const r = await runCli(['ctl', 'status', '--socket', f.dirs.socket, '--json']);
  expect(r.exitCode, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as StatusResponseJson).shards?.find((s) => s.shardId === id);
}

async function alive(pid: number): Promise<boolean> {
  return (await f.lab.run(['kill', '-0', String(pid)])).exitCode === 0;
}

/** Whether the engine on `port` says `n` requests are running (vLLM's gauge, which the sim serves). */
async function running(port: number, n: number): Promise<boolean> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return new RegExp(`^vllm:num_requests_running\\{[^}]*\\} ${n}\\.0$`, 'm').test(text);
}

async function untilTrue(check: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The pid (in the lab) of the worker the sim setsid()ed out of its group, from the shard's log; `not`: an earlier engine's. */
async function escapedChildOf(id: string, not = 0): Promise<number> {
  const log = join(f.dirs.logDir, 'shards', `${id}.log`);
  let pid = 0;
  await untilTrue(async () => {
    const all = [...readFileSync(log, 'utf8').matchAll(/Escaped worker process (\d+) ready/g)].map((m) => Number(m[1]));
    pid = all.find((p) => p !== not) ?? 0;
    return pid > 0;
  }, 'the escaped worker said it is ready');
  return pid;
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `engines in transient units under a real systemd (skipped: ${unavailable})` : 'engines in transient units under a real systemd',
  { timeout: 60_000 },
  () => {
    beforeAll(async () => {
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sdengines-'));
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') });
      const cp = await startControlPlane();
      const dirs = agentDirs(root);
      const configPath = join(root, 'agent.yaml');
      f = { lab, cp, root, dirs, configPath };
      writeFileSync(configPath, configYaml(cp.url, dirs));
      const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn: agentLogDropIn(join(root, 'agent.log')) });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode).toBe(0);
      await startAgent();
    }, 60_000);

    afterAll(() => endLabFile(f));

    it('auto picks systemd-run under systemd as PID 1: the shard is READY in llmgw-shard-<id>.service in llmgw.slice with the configured resource properties, and ctl status and the state file name its unit', async () => {
      // The same decision the agent made, asked of this build inside the lab (outside it, choose-launcher.test.ts sees direct).
      const probe = await f.lab.run([
        process.execPath,
        '--input-type=module',
        '-e',
        `const { chooseLauncher } = await import(${JSON.stringify(join(REPO_ROOT, 'dist/agent/supervisor/launch/choose-launcher.js'))}); console.log(JSON.stringify(await chooseLauncher('auto')));`,
      ]);
      expect(JSON.parse(String(probe.stdout))).toMatchObject({ launcher: 'systemd-run', why: expect.stringContaining('auto: systemd is PID 1') });

      const engine = await startShard('u1');
      const unit = unitOf('u1');
      expect(await f.lab.show(unit, 'ActiveState')).toBe('active');
      expect(await f.lab.show(unit, 'Slice')).toBe('llmgw.slice');
      // supervisor.unit_properties, on the unit as systemd holds it.
      expect(await f.lab.show(unit, 'CPUWeight')).toBe('150');
      expect(await f.lab.show(unit, 'TasksMax')).toBe('512');
      expect(Number(await f.lab.show(unit, 'MainPID'))).toBe(engine.pid);
      // systemd, not the agent, appends the engine's output to the shard's log.
      expect(readFileSync(join(f.dirs.logDir, 'shards', 'u1.log'), 'utf8')).toContain('vLLM API server version');
      expect(await ctlShard('u1')).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid, launcher: 'systemd-run', unit });
      const table = await runCli(['ctl', 'status', '--socket', f.dirs.socket]);
      expect(table.stdout).toMatch(/^u1 .* llmgw-shard-u1\.service$/m);
      const state = JSON.parse(readFileSync(join(f.dirs.stateDir, 'shards', 'u1.json'), 'utf8')) as { launcher: string; unit: { name: string; invocationId: string } };
      expect(state.launcher).toBe('systemd-run');
      expect(state.unit).toEqual({ name: unit, invocationId: await f.lab.show(unit, 'InvocationID') });

      expect(S[(await stopShard('u1')).state]).toBe('STOPPED');
      expect(await f.lab.show(unit, 'LoadState')).toBe('not-found');
    });

    it("reports an engine's death with the exit status systemd recorded, and unloads its unit", async () => {
      const engine = await startShard('u2');
      const failed = f.cp.cp.waitFor(NODE, shardIs('u2', S.FAILED, S.EXITED), 10_000);
      expect((await f.lab.run(['kill', '-KILL', String(engine.pid)])).exitCode).toBe(0);
      const st = (await failed).msg.value as ShardStatus;
      expect(S[st.state]).toBe('FAILED');
      expect(st.error).toMatch(/^engine was killed by SIGKILL \(recorded by systemd, llmgw-shard-u2\.service Result=signal\)$/);
      expect(st.exitCode).toBe(137);
      // Read, reported, then reset: the same shard id can start again.
      await f.lab.waitShow(unitOf('u2'), 'LoadState', (v) => v === 'not-found', 10_000);
      const again = await startShard('u2');
      expect(again.pid).not.toBe(engine.pid);
      expect(S[(await stopShard('u2')).state]).toBe('STOPPED');
    });

    it("stopping a shard ends every process of its unit's cgroup, also a worker that setsid()ed out of the engine's process group; signalling the group alone leaves that worker running", async () => {
      const args = ['--load-time', '200ms', '--spawn-escaping-child'];
      // What a process-group stop (all the direct launcher has) does, tried on a unit engine with
      // the agent down, so that nothing but that signal acts: the worker survives it, in the unit.
      const first = await startShard('u3', args);
      const escaped1 = await escapedChildOf('u3');
      expect((await systemctl('stop', AGENT)).exitCode).toBe(0);
      expect((await f.lab.run(['kill', '-TERM', '--', `-${first.pid}`])).exitCode).toBe(0);
      await untilTrue(async () => !(await alive(first.pid)), 'the engine ended on SIGTERM to its group');
      await new Promise((r) => setTimeout(r, 500));
      expect(await alive(escaped1), 'a group signal reached the setsid()ed worker').toBe(true);
      expect(await f.lab.show(unitOf('u3'), 'SubState')).toBe('exited');
      // The next agent finds the engine gone and ends the rest of its unit's cgroup.
      // Its FAILED report comes after its Register: waited for here, or the start below would take it for its own answer.
      const recovered = f.cp.cp.waitFor(NODE, shardIs('u3', S.FAILED), 30_000);
      await startAgent();
      await untilTrue(async () => !(await alive(escaped1)), "the agent ended the rest of the dead engine's unit");
      expect(((await recovered).msg.value as ShardStatus).error).toMatch(/could not be identified \(process \d+ is gone/);

      // The agent's stop: the whole cgroup, the escaped worker with it.
      const second = await startShard('u3', args);
      const escaped2 = await escapedChildOf('u3', escaped1);
      expect(await alive(escaped2)).toBe(true);
      expect(S[(await stopShard('u3')).state]).toBe('STOPPED');
      expect(await alive(second.pid)).toBe(false);
      expect(await alive(escaped2), 'the stop left the setsid()ed worker running').toBe(false);
      expect(await f.lab.show(unitOf('u3'), 'LoadState')).toBe('not-found');
    });

    it("a stop by the agent SIGTERMs the unit's main process alone: its in-flight request completes although a SIGTERM to its worker would abort it, then the engine exits 0, its worker with it, and the shard is STOPPED", async () => {
      const engine = await startShard('m1', ['--load-time', '200ms', '--token-latency', '100ms', '--spawn-child', '--fragile-worker']);
      expect(await f.lab.show(unitOf('m1'), 'KillMode')).toBe('mixed');
      const request = fetch(`http://127.0.0.1:${engine.port}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'hi', max_tokens: 10 }) });
      await untilTrue(() => running(engine.port, 1), 'one request in flight');
      const stopped = await stopShard('m1');
      const answer = await request;
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(10);
      const log = readFileSync(join(f.dirs.logDir, 'shards', 'm1.log'), 'utf8');
      expect(log).toMatch(/received SIGTERM; finishing 1 in-flight request/);
      expect(log).not.toMatch(/died unexpectedly/);
      expect(S[stopped.state]).toBe('STOPPED');
      expect(await alive(engine.pid)).toBe(false);
      expect(await f.lab.show(unitOf('m1'), 'LoadState')).toBe('not-found');
    });

    it('a worker left in the unit after its engine exited on SIGTERM is given the rest of stop_grace, then SIGKILLed with the cgroup', async () => {
      const engine = await startShard('m2', ['--load-time', '200ms', '--spawn-escaping-child']);
      const escaped = await escapedChildOf('m2');
      const t0 = Date.now();
      expect(S[(await stopShard('m2')).state]).toBe('STOPPED');
      // stop_grace is 3s (agentConfigYaml): the engine exited at once, its leftover was waited for.
      expect(Date.now() - t0).toBeGreaterThanOrEqual(3000);
      expect(readFileSync(join(f.dirs.logDir, 'shards', 'm2.log'), 'utf8')).toMatch(/received SIGTERM; finishing 0 in-flight/);
      expect(await alive(engine.pid)).toBe(false);
      expect(await alive(escaped)).toBe(false);
      expect(await f.lab.show(unitOf('m2'), 'LoadState')).toBe('not-found');
    });

    it("an operator's systemctl stop of a unit the agent started also goes main-first (KillMode=mixed): the in-flight request completes", async () => {
      const engine = await startShard('m3', ['--load-time', '200ms', '--token-latency', '100ms', '--spawn-child', '--fragile-worker']);
      const request = fetch(`http://127.0.0.1:${engine.port}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'hi', max_tokens: 10 }) });
      await untilTrue(() => running(engine.port, 1), 'one request in flight');
      const ended = f.cp.cp.waitFor(NODE, shardIs('m3', S.EXITED, S.FAILED, S.STOPPED), 30_000);
      expect((await systemctl('stop', unitOf('m3'))).exitCode).toBe(0);
      const answer = await request;
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(10);
      expect(readFileSync(join(f.dirs.logDir, 'shards', 'm3.log'), 'utf8')).not.toMatch(/died unexpectedly/);
      await ended;
      expect(await alive(engine.pid)).toBe(false);
    });

    it("an agent restart adopts the unit engine by its unit's invocation id; one whose engine died while the agent was down is reported FAILED with systemd's status; one whose unit is another run is kept, by pid", async () => {
      const kept = await startShard('u4');
      const doomed = await startShard('u5');
      expect((await systemctl('stop', AGENT)).exitCode).toBe(0);
      // Stopping the agent never touches its engines' units.
      expect(await f.lab.show(unitOf('u4'), 'ActiveState')).toBe('active');
      expect((await f.lab.run(['kill', '-KILL', String(doomed.pid)])).exitCode).toBe(0);
      await f.lab.waitShow(unitOf('u5'), 'ActiveState', (v) => v === 'failed', 10_000);

      const keptReady = later(f.cp.cp.waitFor(NODE, shardIs('u4', S.READY), 30_000));
      // Adopted and settled before the stream is up, it is READY in Register; else in a status after it.
      const doomedReport = later(f.cp.cp.waitFor(NODE, shardIs('u5', S.FAILED), 30_000));
      const reg = (await startAgent()).msg.value as Register;
      const listed = reg.runningShards.find((r) => r.shardId === 'u4');
      expect(listed?.pid).toBe(kept.pid);
      expect(reg.runningShards.map((r) => r.shardId)).not.toContain('u5');
      const dead = (await doomedReport).msg.value as ShardStatus;
      expect(dead.error).toMatch(/^engine ended while the agent was down: .*systemd recorded: killed by SIGKILL \(llmgw-shard-u5\.service Result=signal\)$/);
      expect(dead.exitCode).toBe(137);
      expect(dead.signal).toBe('SIGKILL');
      if (listed?.state !== S.READY) await keptReady;
      expect(await ctlShard('u4')).toMatchObject({ state: 'SHARD_STATE_READY', pid: kept.pid, adopted: true, unit: unitOf('u4'), launcher: 'systemd-run' });
      await f.lab.waitShow(unitOf('u5'), 'LoadState', (v) => v === 'not-found', 10_000);

      // A unit of that name that is another run (its invocation id differs from the one recorded) is never
      // taken over, but the engine its pid, start time and boot id identify is kept: watched and stopped by pid.
      expect((await systemctl('stop', AGENT)).exitCode).toBe(0);
      const statePath = join(f.dirs.stateDir, 'shards', 'u4.json');
      const state = JSON.parse(readFileSync(statePath, 'utf8')) as { unit: { invocationId: string } };
      state.unit.invocationId = '0'.repeat(32);
      writeFileSync(statePath, JSON.stringify(state));
      const reg2 = (await startAgent()).msg.value as Register;
      expect(reg2.runningShards.find((r) => r.shardId === 'u4')?.pid).toBe(kept.pid);
      const byPid = await ctlShard('u4');
      expect(byPid).toMatchObject({ pid: kept.pid, adopted: true, unit: '' });
      expect(byPid?.note).toMatch(/is another run \(invocation .*\); watched by pid$/);
      expect(S[(await stopShard('u4')).state]).toBe('STOPPED');
      // Killed by pid, outside its unit: the lab's systemd reaps it when it gets to it (a zombie answers kill -0 until then).
      await untilTrue(async () => !(await alive(kept.pid)), 'the engine kept by pid to be gone and reaped', 30_000);
    });

    it('with launcher: direct (all it can do outside systemd), a stop signals the process group only: the setsid()ed worker survives it', async () => {
      writeFileSync(f.configPath, configYaml(f.cp.url, f.dirs, 'direct'));
      const registered = later(f.cp.cp.waitFor(NODE, isRegister, 30_000));
      expect((await systemctl('restart', AGENT)).exitCode).toBe(0);
      await registered;
      const engine = await startShard('d1', ['--load-time', '200ms', '--spawn-escaping-child']);
      expect(await ctlShard('d1')).toMatchObject({ launcher: 'direct', unit: '' });
      const escaped = await escapedChildOf('d1');
      expect(S[(await stopShard('d1')).state]).toBe('STOPPED');
      expect(await alive(engine.pid)).toBe(false);
      // Direct cannot fence a setsid()ed child: it is outside every group the agent knows. Ended here by pid.
      expect(await alive(escaped)).toBe(true);
      expect((await f.lab.run(['kill', '-KILL', String(escaped)])).exitCode).toBe(0);
      await untilTrue(async () => !(await alive(escaped)), 'the escaped worker was killed by the test');
    });
  },
);

