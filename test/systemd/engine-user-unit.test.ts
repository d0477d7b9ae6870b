import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ShardInfoJson, StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';
import { type AgentMessage, type Register, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardLogPath } from '../../src/lib/shard-layout.js';
import { type AgentDirs, agentConfigYaml, agentDirs } from '../helpers/agent-config-yaml.js';
import { copyCliForNobody } from '../helpers/copy-cli-for-nobody.js';
import { freePort, processesWritingUnder } from '../helpers/engine-processes.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, agentLogDropIn, installAgentUnit, bootLab, labLeftovers, labUnavailableReason, type SystemdLab, stopAllLabs } from '../helpers/systemd-lab.js';

/*
 * engines.<name>.user under the systemd-run launcher, in a real systemd (the
 * lab's, PID 1 of its own namespaces: test/helpers/systemd-lab-boot.sh). The
 * agent runs as root in the packaged unit and starts the sim engine in a
 * transient unit whose User=/Group= are nobody's; what the test checks is what
 * the kernel and systemd say of that unit's process, not what the agent
 * meant. One lab, control plane and agent for the whole file; the tests run
 * in order on one shard (start, secrets, adoption, stop). Pids are the lab's
 * pid namespace's, as the agent reports them; `lab.run` reads /proc there.
 */

const AGENT = AGENT_UNIT;
const NODE = 'node-user';
const SHARD = 'nu1';
const UNIT = `llmgw-shard-${SHARD}.service`;
const NOBODY = 65534;
/** A secret of the engine's (engines.sim.env): it must reach the engine, and no one else. */
const SECRET = 'hf_unit_user_secret_4f1d';
const S = ShardState;
const unavailable = await labUnavailableReason();

interface Fixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  root: string;
  cli: string;
  dirs: AgentDirs;
}
let f: Fixture;
/** The shard's engine, as the agent reported it READY. */
let engine: { pid: number; port: number };

function configYaml(cpUrl: string, dirs: AgentDirs, cli: string): string {
  const command = JSON.stringify([process.execPath, join(cli, 'bin/run.js'), 'sim', 'engine']);
  const engines = ['engines:', '  sim:', `    command: ${command}`, '    user: nobody', `    env: { HF_TOKEN: "${SECRET}" }`].join('\n');
  const yaml = agentConfigYaml({ server: cpUrl, dirs, nodeId: NODE, extraYaml: engines });
  // Explicit, though auto picks it in the lab too: what is under test is this launcher.
  return yaml.replace('\nsupervisor:\n', '\nsupervisor:\n  launcher: systemd-run\n');
}

/** A wait set up before the event it waits for; marked handled so a test failing earlier leaves no unhandled rejection. */
function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

async function systemctl(...args: string[]): Promise<{ exitCode: number; stderr: string }> {
  const r = await f.lab.run(['systemctl', ...args], { timeoutMs: 60_000 });
  return { exitCode: r.exitCode ?? -1, stderr: String(r.stderr) };
}

function agentLog(): string {
  try {
    return readFileSync(join(f.root, 'agent.log'), 'utf8').split('\n').slice(-30).join('\n');
  } catch {
    return '(no agent log)';
  }
}

async function startAgent(): Promise<AgentMessage> {
  const registered = later(f.cp.cp.waitFor(NODE, isRegister, 30_000));
  const r = await systemctl('start', AGENT);
  expect(r.exitCode, `${r.stderr}\n${agentLog()}`).toBe(0);
  return registered;
}

/** A file of /proc/<pid>/ read inside the lab, whose pid namespace the pid is in. */
async function procFile(pid: number, file: string): Promise<string> {
  const r = await f.lab.run(['cat', `/proc/${pid}/${file}`]);
  expect(r.exitCode, `/proc/${pid}/${file}: ${String(r.stderr)}`).toBe(0);
  return String(r.stdout);
}

/** A field of /proc/<pid>/status ("Uid", "Gid", "Groups"), as the kernel wrote it. */
async function procStatus(pid: number, field: string): Promise<string> {
  const line = (await procFile(pid, 'status')).split('\n').find((l) => l.startsWith(`${field}:`));
  if (line === undefined) throw new Error(`no ${field} in /proc/${pid}/status`);
  return line.slice(field.length + 1).trim();
}

async function ctlShard(id: string): Promise<ShardInfoJson | undefined> {
  const r = await runCli(['ctl', 'status', '--socket', f.dirs.socket, '--json']);
  expect(r.exitCode, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as StatusResponseJson).shards?.find((s) => s.shardId === id);
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `engines.<name>.user under systemd-run (skipped: ${unavailable})` : 'engines.<name>.user under systemd-run, in a real systemd',
  { timeout: 60_000 },
  () => {
    beforeAll(async () => {
      const root = mkdtempSync(join(tmpdir(), 'llmgw-sduser-'));
      const cli = copyCliForNobody('llmgw-unituser-cli-');
      const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') });
      const cp = await startControlPlane();
      const dirs = agentDirs(root);
      f = { lab, cp, root, cli, dirs };
      const configPath = join(root, 'agent.yaml');
      writeFileSync(configPath, configYaml(cp.url, dirs, cli));
      const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn: agentLogDropIn(join(root, 'agent.log')) });
      expect(installed.exitCode, String(installed.stderr)).toBe(0);
      expect(reloaded.exitCode).toBe(0);
      await startAgent();
    }, 60_000);

    afterAll(async () => {
      // The lab first, and the agent and every engine with it, then the files.
      await stopAllLabs();
      await f?.cp.close();
      try {
        expect(labLeftovers()).toEqual([]);
        if (f) expect(processesWritingUnder(f.root)).toEqual([]);
      } finally {
        if (f) {
          rmSync(f.root, { recursive: true, force: true });
          rmSync(f.cli, { recursive: true, force: true });
        }
      }
    });

    it("runs the engine's unit as nobody (uid and gid 65534, no group but nobody's own, nobody's HOME, USER and LOGNAME) and it becomes READY with its output in the shard's log", async () => {
      const port = await freePort();
      const ready = f.cp.cp.waitFor(NODE, shardIs(SHARD, S.READY, S.FAILED, S.EXITED), 30_000);
      f.cp.cp.send(NODE, { case: 'start', value: simStart(SHARD, port, { gpu: freeFakeGpu(0) }) });
      const st = (await ready).msg.value as ShardStatus;
      expect(S[st.state], `${st.error}\n${agentLog()}`).toBe('READY');
      engine = { pid: st.pid, port };
      expect(Number(await f.lab.show(UNIT, 'MainPID'))).toBe(engine.pid);

      // Real, effective, saved and filesystem ids all nobody's: nothing of root is left to regain.
      expect((await procStatus(engine.pid, 'Uid')).split(/\s+/)).toEqual(Array(4).fill(String(NOBODY)));
      expect((await procStatus(engine.pid, 'Gid')).split(/\s+/)).toEqual(Array(4).fill(String(NOBODY)));
      // systemd sets the account's own groups (initgroups): for nobody its one group, nothing of root's.
      // (The direct launcher sets none at all; an account's groups, video or render, may be what opens its GPUs.)
      const ownGroups = String((await f.lab.run(['id', '-G', 'nobody'])).stdout).trim();
      expect(ownGroups).toBe(String(NOBODY));
      expect(await procStatus(engine.pid, 'Groups')).toBe(ownGroups);
      const env = (await procFile(engine.pid, 'environ')).split('\0');
      expect(env).toContain('HOME=/nonexistent');
      expect(env).toContain('USER=nobody');
      expect(env).toContain('LOGNAME=nobody');

      // systemd opened the log as root before switching to nobody: the engine's output is there, the file root's.
      const logPath = shardLogPath(f.dirs.logDir, SHARD);
      expect(readFileSync(logPath, 'utf8')).toContain('vLLM API server version');
      expect(statSync(logPath).uid).toBe(0);
      expect(await ctlShard(SHARD)).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid, launcher: 'systemd-run', unit: UNIT });
    });

    it('keeps the environment file with the secret 0600 and root-owned, out of reach of nobody, while the engine got the secret from it', async () => {
      const envFile = join(f.dirs.stateDir, 'shards', `${SHARD}.env`);
      const st = statSync(envFile);
      expect(st.mode & 0o777).toBe(0o600);
      expect([st.uid, st.gid]).toEqual([0, 0]);
      expect(readFileSync(envFile, 'utf8')).toContain(SECRET);
      // systemd read it as root; the engine, as nobody, could not have.
      expect((await procFile(engine.pid, 'environ')).split('\0')).toContain(`HF_TOKEN=${SECRET}`);
      const asNobody = await f.lab.run(['setpriv', `--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', 'cat', envFile]);
      expect(asNobody.exitCode).not.toBe(0);
      expect(String(asNobody.stdout)).not.toContain(SECRET);
      // Nor is it in the unit, which any local user can read with systemctl show.
      expect(await f.lab.show(UNIT, 'Environment')).not.toContain(SECRET);
    });

    it('an agent restart adopts the nobody engine READY, in its unit', async () => {
      expect((await systemctl('stop', AGENT)).exitCode).toBe(0);
      // Stopping the agent never touches its engines' units.
      expect(await f.lab.show(UNIT, 'ActiveState')).toBe('active');
      const readyAgain = later(f.cp.cp.waitFor(NODE, shardIs(SHARD, S.READY), 30_000));
      const reg = (await startAgent()).msg.value as Register;
      const listed = reg.runningShards.find((r) => r.shardId === SHARD);
      expect(listed?.pid, agentLog()).toBe(engine.pid);
      if (listed?.state !== S.READY) await readyAgain;
      expect(await ctlShard(SHARD)).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid, adopted: true, launcher: 'systemd-run', unit: UNIT });
      expect((await procStatus(engine.pid, 'Uid')).split(/\s+/)).toEqual(Array(4).fill(String(NOBODY)));
    });

    it('stops the nobody engine cleanly: STOPPED, its process gone and its unit unloaded', async () => {
      const stopped = f.cp.cp.waitFor(NODE, shardIs(SHARD, S.STOPPED, S.FAILED), 30_000);
      f.cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: SHARD }) });
      const st = (await stopped).msg.value as ShardStatus;
      expect(S[st.state], st.error).toBe('STOPPED');
      expect((await f.lab.run(['kill', '-0', String(engine.pid)])).exitCode).not.toBe(0);
      await f.lab.waitShow(UNIT, 'LoadState', (v) => v === 'not-found', 10_000);
    });
  },
);
