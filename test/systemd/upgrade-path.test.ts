import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ShardInfoJson, StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';
import { type AgentMessage, type Register, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, agentDirs, type AgentDirs } from '../helpers/agent-config-yaml.js';
import { endLabFile } from '../helpers/end-lab-file.js';
import { freePort } from '../helpers/engine-processes.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, agentLogDropIn, bootLab, installAgentUnit, labUnavailableReason, type SystemdLab } from '../helpers/systemd-lab.js';
import { watchHealth } from '../helpers/watch-health.js';

/*
 * docs/install.md's upgrade path under a real systemd (the lab's, test/helpers/systemd-lab-boot.sh), with
 * engines in their own transient units (launcher auto picks systemd-run there): `llmgw agent
 * install-unit` again, `systemctl daemon-reload`, `systemctl restart llmgw-agent`. And a unit
 * systemd forgot while its engine runs (what the lab did to every engine before its unit path
 * held /run/systemd/transient, new-operator walkthrough 2 row 3): the engine's pid, start time and
 * boot id still match its state file, so it is kept and watched by pid, never killed. Pids below
 * are the lab's pid namespace's, as the agent reports them; `lab.run` acts inside it.
 */

const NODE = 'node-up';
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

/** A wait set up before the event it waits for; marked handled so a test failing earlier leaves no unhandled rejection. */
function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

async function systemctl(...args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const r = await f.lab.run(['systemctl', ...args], { timeoutMs: 60_000 });
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

function agentLog(): string {
  try {
    return readFileSync(join(f.root, 'agent.log'), 'utf8');
  } catch {
    return '';
  }
}

const gpus = new Map<string, number>();

async function startShard(id: string, args: string[] = ['--load-time', '200ms']): Promise<{ pid: number; port: number }> {
  const port = await freePort();
  if (!gpus.has(id)) gpus.set(id, freeFakeGpu(gpus.size));
  const ready = f.cp.cp.waitFor(NODE, shardIs(id, S.READY, S.FAILED, S.EXITED), 30_000);
  f.cp.cp.send(NODE, { case: 'start', value: simStart(id, port, { args, gpu: gpus.get(id) }) });
  const st = (await ready).msg.value as ShardStatus;
  expect(S[st.state], `${st.error}\n${agentLog().split('\n').slice(-30).join('\n')}`).toBe('READY');
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

/** Host pids of the processes whose stdout or stderr is shard `id`'s log: what is left of its engine. */
function writersOf(id: string): number[] {
  const log = join(f.dirs.logDir, 'shards', `${id}.log`);
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if ([1, 2].some((fd) => readlinkSync(`/proc/${name}/fd/${fd}`) === log)) pids.push(Number(name));
    } catch {
      // Gone, or a kernel thread: not a writer.
    }
  }
  return pids;
}

async function untilTrue(check: () => Promise<boolean> | boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Restarts the agent's unit; resolves with the new agent's Register. */
async function restartAgent(): Promise<Register> {
  const registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
  const r = await systemctl('restart', AGENT_UNIT);
  expect(r.exitCode, `${r.stderr}\n${agentLog().split('\n').slice(-30).join('\n')}`).toBe(0);
  return (await registered).msg.value as Register;
}

/** Shard `id` READY again after a restart: in the Register, or in a status after it. */
async function readyAgain(reg: Register, id: string, ready: Promise<AgentMessage>): Promise<number> {
  const listed = reg.runningShards.find((r) => r.shardId === id);
  expect(listed, `the restarted agent did not list ${id} in Register\n${agentLog().split('\n').slice(-30).join('\n')}`).toBeDefined();
  if (listed?.state === S.READY) return listed.pid;
  const st = (await ready).msg.value as ShardStatus;
  expect(S[st.state], st.error).toBe('READY');
  return st.pid;
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `the upgrade path under a real systemd (skipped: ${unavailable})` : 'the upgrade path under a real systemd, engines in transient units',
  { timeout: 90_000 },
  () => {
    beforeAll(async () => {
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sdupgrade-'));
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') }).catch((err: unknown) => {
        rmSync(root, { recursive: true, force: true });
        throw err;
      });
      const cp = await startControlPlane();
      const dirs = agentDirs(root);
      const configPath = join(root, 'agent.yaml');
      f = { lab, cp, root, dirs, configPath };
      // No launcher line: auto, which picks systemd-run under the lab's systemd.
      writeFileSync(configPath, agentConfigYaml({ server: cp.url, dirs, nodeId: NODE, extraYaml: ['engines:', '  sim:', '    env: {}', '    extra_args: []'].join('\n') }));
      const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn: agentLogDropIn(join(root, 'agent.log')) });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode).toBe(0);
      const registered = later(cp.cp.waitFor(NODE, isRegister, 30_000));
      const started = await systemctl('start', AGENT_UNIT);
      expect(started.exitCode, `${started.stderr}\n${agentLog()}`).toBe(0);
      await registered;
    }, 90_000);

    afterAll(() => endLabFile(f));

    it("docs/install.md's upgrade path (install-unit again, daemon-reload, restart) with two engines serving: both adopted with the same pids and units, READY again, served throughout", async () => {
      const a = await startShard('a1');
      const b = await startShard('a2');
      const invocations = [await f.lab.show(unitOf('a1'), 'InvocationID'), await f.lab.show(unitOf('a2'), 'InvocationID')];
      const health = [watchHealth(a.port), watchHealth(b.port)];

      // The operator's steps: the new build writes its unit, systemd reloads, the agent restarts.
      const { installed, reloaded } = await installAgentUnit(f.lab, { configPath: f.configPath, dropIn: agentLogDropIn(join(f.root, 'agent.log')) });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode, String(reloaded.stderr)).toBe(0);
      // A reload keeps transient units, as on a real host.
      expect(await f.lab.show(unitOf('a1'), 'LoadState')).toBe('loaded');
      const readyA = later(f.cp.cp.waitFor(NODE, shardIs('a1', S.READY, S.FAILED), 60_000));
      const readyB = later(f.cp.cp.waitFor(NODE, shardIs('a2', S.READY, S.FAILED), 60_000));
      const reg = await restartAgent();

      expect(await readyAgain(reg, 'a1', readyA)).toBe(a.pid);
      expect(await readyAgain(reg, 'a2', readyB)).toBe(b.pid);
      expect(await ctlShard('a1')).toMatchObject({ state: 'SHARD_STATE_READY', pid: a.pid, adopted: true, unit: unitOf('a1'), launcher: 'systemd-run' });
      expect(await ctlShard('a2')).toMatchObject({ state: 'SHARD_STATE_READY', pid: b.pid, adopted: true, unit: unitOf('a2'), launcher: 'systemd-run' });
      expect((await ctlShard('a1'))?.note ?? '').toBe('');
      expect([await f.lab.show(unitOf('a1'), 'InvocationID'), await f.lab.show(unitOf('a2'), 'InvocationID')]).toEqual(invocations);
      expect(agentLog()).not.toMatch(/killing an engine/);
      for (const h of health) {
        const seen = await h.stop();
        expect(seen.bad).toEqual([]);
        expect(seen.ok).toBeGreaterThan(0);
      }
      // Still stopped through its unit, which the adoption kept.
      expect(S[(await stopShard('a1')).state]).toBe('STOPPED');
      expect(S[(await stopShard('a2')).state]).toBe('STOPPED');
      expect(await f.lab.show(unitOf('a1'), 'LoadState')).toBe('not-found');
      expect(await alive(a.pid)).toBe(false);
    });

    it('a unit systemd forgot (its transient file gone, then daemon-reload) while its engine serves: the restarted agent keeps the engine, same pid, watched by pid with a note in ctl status; a StopShard still ends it and its worker; a death is still seen', async () => {
      // --spawn-child: a worker in the engine's group, which the stop must not leave behind.
      const kept = await startShard('f1', ['--load-time', '200ms', '--spawn-child']);
      const doomed = await startShard('f2');
      const health = watchHealth(kept.port);
      // What the lab did to every engine before its fix, and an operator's rm in /run/systemd/transient would.
      for (const id of ['f1', 'f2']) rmSync(`/proc/${f.lab.pid}/root/run/systemd/transient/${unitOf(id)}`);
      expect((await systemctl('daemon-reload')).exitCode).toBe(0);
      expect(await f.lab.show(unitOf('f1'), 'LoadState')).toBe('not-found');
      expect(await f.lab.show(unitOf('f1'), 'ActiveState')).toBe('active');

      const readyF1 = later(f.cp.cp.waitFor(NODE, shardIs('f1', S.READY, S.FAILED), 60_000));
      const readyF2 = later(f.cp.cp.waitFor(NODE, shardIs('f2', S.READY, S.FAILED), 60_000));
      const reg = await restartAgent();
      expect(await readyAgain(reg, 'f1', readyF1)).toBe(kept.pid);
      expect(await readyAgain(reg, 'f2', readyF2)).toBe(doomed.pid);
      expect(await alive(kept.pid)).toBe(true);
      const note = `unit ${unitOf('f1')} forgotten by systemd (LoadState not-found); watched by pid`;
      expect(await ctlShard('f1')).toMatchObject({ state: 'SHARD_STATE_READY', pid: kept.pid, adopted: true, note });
      const table = await runCli(['ctl', 'status', '--socket', f.dirs.socket]);
      expect(table.stdout).toContain(`f1: note: ${note}`);
      // Said once per engine, as a warning; nothing killed.
      const warnings = agentLog()
        .split('\n')
        .filter((l) => l.includes('"shard":"f1"') && l.includes('watched and stopped by pid'));
      expect(warnings).toHaveLength(1);
      expect(agentLog()).not.toMatch(/killing an engine/);
      const served = await health.stop();
      expect(served.bad).toEqual([]);

      // Its death is seen by pid, as an adopted direct engine's is.
      const failed = later(f.cp.cp.waitFor(NODE, shardIs('f2', S.FAILED, S.EXITED), 20_000));
      expect((await f.lab.run(['kill', '-KILL', String(doomed.pid)])).exitCode).toBe(0);
      const dead = (await failed).msg.value as ShardStatus;
      expect(S[dead.state]).toBe('FAILED');
      expect(dead.error).toMatch(/^engine is gone/);

      // A stop by pid: SIGTERM to the engine alone (it ends its worker), nothing of it left.
      expect(writersOf('f1').length).toBeGreaterThanOrEqual(2);
      expect(S[(await stopShard('f1')).state]).toBe('STOPPED');
      expect(await alive(kept.pid)).toBe(false);
      await untilTrue(() => writersOf('f1').length === 0, "nothing of f1's engine is left writing its log", 10_000);
      expect(readFileSync(join(f.dirs.logDir, 'shards', 'f1.log'), 'utf8')).toMatch(/received SIGTERM/);
    });
  },
);
