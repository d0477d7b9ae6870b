import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type Register, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, agentDirs, type AgentDirs } from '../helpers/agent-config-yaml.js';
import { freePort, processesWritingUnder } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { AGENT_UNIT, installAgentUnit, bootLab, labUnavailableReason, labLeftovers, stopAllLabs, type SystemdLab } from '../helpers/systemd-lab.js';
import { watchHealth } from '../helpers/watch-health.js';

/*
 * The packaged unit (written by `llmgw agent install-unit`, as docs/install.md's production steps do) under
 * a real systemd: the lab's, PID 1 of its own namespaces (test/helpers/systemd-lab-boot.sh). The
 * agent runs this checkout's bin/run.js with this machine's node; its state, logs and socket live
 * in a temp dir under /tmp, which the lab shares (its /run and /var/tmp are its own). Pids below
 * are the lab's pid namespace's, as the agent reports them.
 */

const UNIT = AGENT_UNIT;
const NODE = 'node-a';
const S = ShardState;

/**
 * Short timers for a test, in a drop-in as an operator would add one, so the shipped unit keeps
 * its production values. WatchdogSec 4s: pings every 2 s, slack for a loaded machine, short enough
 * for a quick test. TimeoutAbortSec bounds the watchdog's SIGABRT of a stopped process: a SIGSTOPped
 * agent acts on no signal but SIGKILL, so the whole of it is waited out, whatever its length (1 s here).
 */
const TEST_DROP_IN = ['[Service]', 'WatchdogSec=4s', 'RestartSec=500ms', 'TimeoutStartSec=30s', 'TimeoutStopSec=5s', 'TimeoutAbortSec=1s', ''].join('\n');

const unavailable = await labUnavailableReason();
const TMP_MARKER = join(tmpdir(), `llmgw-systemd-suite-marker-${process.pid}`);

afterAll(async () => {
  await stopAllLabs();
});

interface UnitFixture {
  lab: SystemdLab;
  cp: StartedControlPlane;
  dirs: AgentDirs;
  configPath: string;
  systemctl(...args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }>;
  mainPid(): Promise<number>;
}

/**
 * A wait set up before the event it waits for, awaited (or not: a test that failed earlier) later;
 * marked handled so the control plane's close at the end of a failed test is no unhandled rejection.
 */
function later<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

/** A fresh lab, control plane and temp dir with the unit installed; all torn down when the test ends. */
async function unitFixture(opts: { config?: (dirs: AgentDirs) => string } = {}): Promise<UnitFixture> {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-sdunit-'));
  // The boot's own output, for when a lab does not come up.
  const lab = await bootLab({ logFile: join(root, 'systemd-lab-boot.log') }).catch((err: unknown) => {
    rmSync(root, { recursive: true, force: true });
    throw err;
  });
  // The lab first, and every agent and engine with it, then its files.
  onTestFinished(async () => {
    await lab.stop();
    try {
      // None may outlive it: a process still writing the test's logs is one left behind.
      expect(processesWritingUnder(root)).toEqual([]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
  const cp = await startControlPlane();
  const dirs = agentDirs(root);
  const configPath = join(root, 'agent.yaml');
  const extraYaml = ['engines:', '  sim:', '    env: {}', '    extra_args: []'].join('\n');
  writeFileSync(configPath, opts.config?.(dirs) ?? agentConfigYaml({ server: cp.url, dirs, nodeId: NODE, extraYaml }).replace('\nsupervisor:\n', '\nsupervisor:\n  launcher: direct\n'));

  const { installed, reloaded } = await installAgentUnit(lab, { configPath, dropIn: TEST_DROP_IN, dropInName: 'test-timers.conf' });
  expect(installed.stderr).toBe('');
  expect(installed.exitCode).toBe(0);
  expect(reloaded.exitCode).toBe(0);

  const systemctl = async (...args: string[]) => {
    const r = await lab.run(['systemctl', ...args], { timeoutMs: 60_000 });
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
  };
  const mainPid = async () => Number(await lab.show(UNIT, 'MainPID'));
  return { lab, cp, dirs, configPath, systemctl, mainPid };
}

/** Starts the unit and one sim shard on it; resolves once the shard is READY. */
async function startWithShard(f: UnitFixture): Promise<{ pid: number; port: number }> {
  const registered = later(f.cp.cp.waitFor(NODE, isRegister, 30_000));
  const started = await f.systemctl('start', UNIT);
  expect(started.stderr).toBe('');
  expect(started.exitCode).toBe(0);
  await registered;
  const port = await freePort();
  const ready = f.cp.cp.waitFor(NODE, shardIs('s1', S.READY, S.FAILED, S.EXITED), 30_000);
  f.cp.cp.send(NODE, { case: 'start', value: simStart('s1', port) });
  const st = (await ready).msg.value as ShardStatus;
  expect(S[st.state], st.error).toBe('READY');
  return { pid: st.pid, port };
}

/**
 * What a new agent says of s1: the Register it sends lists the shard, and the shard is READY,
 * either in that Register or (once health-checked) in a status after it.
 */
async function adoptedBy(registered: Promise<AgentMessage>, shardReady: Promise<AgentMessage>): Promise<{ pid: number }> {
  const reg = (await registered).msg.value as Register;
  const listed = reg.runningShards.find((r) => r.shardId === 's1');
  expect(listed, 'the restarted agent did not list s1 in Register').toBeDefined();
  if (listed?.state === S.READY) return { pid: listed.pid };
  const st = (await shardReady).msg.value as ShardStatus;
  expect(S[st.state], st.error).toBe('READY');
  return { pid: st.pid };
}

/** The agent's own view over its admin socket: s1's state and pid. */
async function ctlShard(f: UnitFixture): Promise<{ state: string; pid: number } | undefined> {
  const r = await runCli(['ctl', 'status', '--socket', f.dirs.socket, '--json']);
  expect(r.exitCode, r.stderr).toBe(0);
  const status = JSON.parse(r.stdout) as { shards?: { shardId: string; state: string; pid: number }[] };
  return status.shards?.find((s) => s.shardId === 's1');
}

/** The unit's Result values seen until systemd has restarted it once (NRestarts 1). */
async function observeUntilRestarted(f: UnitFixture): Promise<string[]> {
  const results = new Set<string>();
  const deadline = Date.now() + 20_000;
  for (;;) {
    const r = await f.lab.run(['systemctl', 'show', '-p', 'Result', '-p', 'NRestarts', UNIT]);
    const props = Object.fromEntries(String(r.stdout).split('\n').map((l) => l.split('=', 2) as [string, string]));
    if (props.Result) results.add(props.Result);
    if (Number(props.NRestarts) >= 1) return [...results];
    if (Date.now() > deadline) throw new Error(`${UNIT} was not restarted within 20 s; results seen: ${[...results].join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function engineAlive(f: UnitFixture, pid: number): Promise<boolean> {
  return (await f.lab.run(['kill', '-0', String(pid)])).exitCode === 0;
}

function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

describe.skipIf(unavailable !== undefined)(
  unavailable ? `the agent's unit under a real systemd (skipped: ${unavailable})` : "the agent's unit under a real systemd",
  { timeout: 60_000 },
  () => {
    afterAll(async () => {
      await stopAllLabs();
      // The suite must leave nothing: no lab systemd, no lab cgroup, and /tmp as it was.
      expect(labLeftovers()).toEqual([]);
      expect(readFileSync(TMP_MARKER, 'utf8')).toBe('still here');
      rmSync(TMP_MARKER, { force: true });
    });
    writeFileSync(TMP_MARKER, 'still here');

    it('systemctl start returns only once the admin socket answers, and the unit makes its directories private', async () => {
      const f = await unitFixture();
      const r = await f.systemctl('start', UNIT);
      // No wait, no retry: Type=notify must not let start return before READY=1, which the agent sends once it listens.
      const answers = await socketAnswers(f.dirs.socket);
      expect(r.stderr).toBe('');
      expect(r.exitCode).toBe(0);
      expect(answers).toBe(true);
      const status = await runCli(['ctl', 'status', '--socket', f.dirs.socket, '--json']);
      expect(status.exitCode, status.stderr).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ nodeId: NODE, pid: await f.mainPid() });
      expect(await f.lab.show(UNIT, 'ActiveState')).toBe('active');
      const modes = await f.lab.run(['stat', '-c', '%n %a', '/var/lib/llmgw', '/var/log/llmgw', '/run/llmgw']);
      expect(String(modes.stdout).split('\n')).toEqual(['/var/lib/llmgw 700', '/var/log/llmgw 750', '/run/llmgw 750']);
    });

    it('an agent that stops answering (SIGSTOP) is killed and restarted by the watchdog; its engine serves throughout and the new agent reports it READY', async () => {
      const f = await unitFixture();
      const engine = await startWithShard(f);
      const health = watchHealth(engine.port);
      const wedged = await f.mainPid();
      const registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
      const shardReady = later(f.cp.cp.waitFor(NODE, shardIs('s1', S.READY, S.FAILED), 60_000));
      expect((await f.lab.run(['kill', '-STOP', String(wedged)])).exitCode).toBe(0);

      // Why it was restarted: Result=watchdog holds from the timeout until the restart (RestartSec and more).
      const seen = await observeUntilRestarted(f);
      expect(seen).toContain('watchdog');
      const adopted = await adoptedBy(registered, shardReady);
      expect(adopted.pid).toBe(engine.pid);
      expect(await f.mainPid()).not.toBe(wedged);
      expect(await f.lab.show(UNIT, 'ActiveState')).toBe('active');
      expect(await ctlShard(f)).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid });
      const served = await health.stop();
      expect(served.bad).toEqual([]);
      expect(served.ok).toBeGreaterThan(0);
    });

    it('systemctl restart and systemctl stop never touch an engine, and the agent started after either adopts it', async () => {
      const f = await unitFixture();
      const engine = await startWithShard(f);
      const health = watchHealth(engine.port);

      let registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
      let shardReady = later(f.cp.cp.waitFor(NODE, shardIs('s1', S.READY, S.FAILED), 60_000));
      const restarted = await f.systemctl('restart', UNIT);
      expect(restarted.exitCode, restarted.stderr).toBe(0);
      expect((await adoptedBy(registered, shardReady)).pid).toBe(engine.pid);

      const stopped = await f.systemctl('stop', UNIT);
      expect(stopped.exitCode, stopped.stderr).toBe(0);
      expect(await f.lab.show(UNIT, 'ActiveState')).toBe('inactive');
      expect(await engineAlive(f, engine.pid)).toBe(true);

      registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
      shardReady = later(f.cp.cp.waitFor(NODE, shardIs('s1', S.READY, S.FAILED), 60_000));
      expect((await f.systemctl('start', UNIT)).exitCode).toBe(0);
      expect((await adoptedBy(registered, shardReady)).pid).toBe(engine.pid);
      expect(await ctlShard(f)).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid });
      const seen = await health.stop();
      expect(seen.bad).toEqual([]);
      expect(seen.ok).toBeGreaterThan(0);
    });

    it('a configuration error exits 78 and systemd does not restart the agent', async () => {
      // A key the agent does not know (a typo): the agent names it in one line and exits 78.
      const f = await unitFixture({ config: (dirs) => `node_id: ${NODE}\nserver: http://127.0.0.1:1\nheartbeat_intervall: 1s\nadmin:\n  socket: ${dirs.socket}\n` });
      const r = await f.systemctl('start', UNIT);
      expect(r.exitCode).not.toBe(0);
      await f.lab.waitShow(UNIT, 'ActiveState', (v) => v === 'failed', 30_000);
      expect(await f.lab.show(UNIT, 'ExecMainStatus')).toBe('78');
      // RestartSec is 500 ms here: four of them without a restart is RestartPreventExitStatus at work.
      await new Promise((resolve) => setTimeout(resolve, 2000));
      expect(await f.lab.show(UNIT, 'NRestarts')).toBe('0');
      expect(await f.lab.show(UNIT, 'ActiveState')).toBe('failed');
    });

    it('a crashed agent (SIGKILL) is restarted by Restart=always and adopts its engine', async () => {
      const f = await unitFixture();
      const engine = await startWithShard(f);
      const health = watchHealth(engine.port);
      const crashed = await f.mainPid();
      const registered = later(f.cp.cp.waitFor(NODE, isRegister, 60_000));
      const shardReady = later(f.cp.cp.waitFor(NODE, shardIs('s1', S.READY, S.FAILED), 60_000));
      expect((await f.lab.run(['kill', '-KILL', String(crashed)])).exitCode).toBe(0);

      await f.lab.waitShow(UNIT, 'NRestarts', (v) => v === '1', 30_000);
      expect((await adoptedBy(registered, shardReady)).pid).toBe(engine.pid);
      expect(await f.mainPid()).not.toBe(crashed);
      expect(await ctlShard(f)).toMatchObject({ state: 'SHARD_STATE_READY', pid: engine.pid });
      const seen = await health.stop();
      expect(seen.bad).toEqual([]);
      expect(seen.ok).toBeGreaterThan(0);
    });
  },
);
