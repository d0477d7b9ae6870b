import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type Register, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentConfigYaml, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { spawnAgentProcess } from '../helpers/spawn-agent-process.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { buildFakeNvml, fakeNvmlUnavailable } from './discovery/fake-nvml.js';

/*
 * What an operator is told for a `ctl` change asked while the agent stops
 * (SIGTERM), and what the next agent then finds. A real `llmgw agent run`
 * whose stop is held open by the fake NVML's event wait hanging (`hang` in
 * its control file, fixtures/nvml/fake-nvml.c: a driver stuck in a wait,
 * which the stop waits for), so that the ctl calls land inside the stop
 * for certain: the test waits for the agent's own "stopping" line and for
 * the fake's `.hanging` marker, never for a sleep.
 */

const unavailable = fakeNvmlUnavailable();

/** What onShutdownSignals' first handler logs (run-agent.ts), in the same tick the stop begins. */
const STOPPING_LINE = 'stopping; engines keep running';

async function stoppableAgent() {
  const plane = await startControlPlane();
  const dirs = tempAgentDirs('llmgw-stopping-');
  const control = join(dirs.root, 'nvml-control');
  writeFileSync(control, '');
  // No kernel log: the NVML wait is the one thing the stop waits on here.
  const yaml = agentConfigYaml({ server: plane.url, dirs, nvmlLibrary: buildFakeNvml() }).replace(/^discovery:$/m, 'discovery:\n  kmsg: ""');
  const configPath = join(dirs.root, 'agent.yaml');
  writeFileSync(configPath, yaml);
  /** Starts an agent on the same directories and waits for its Register. */
  const spawn = async () => {
    const registered = plane.cp.waitFor('node-a', isRegister, 30_000);
    const { child, records } = spawnAgentProcess(configPath, { LLMGW_FAKE_NVML_CONTROL: control });
    const exited = child.then((r) => r.exitCode);
    onTestFinished(async () => {
      // Released first: a hung wait would outlive nothing, but the next test must not read this file's state.
      writeFileSync(control, '');
      child.kill('SIGKILL');
      await exited;
    });
    const register = (await registered).msg.value as Register;
    return { child, exited, records, register };
  };
  const ctl = (...args: string[]) => runCli(['ctl', ...args, '--socket', dirs.socket]);
  return { plane, dirs, control, spawn, ctl };
}

type Stoppable = Awaited<ReturnType<typeof stoppableAgent>>;

async function readyShard(a: Stoppable, id: string, gpu: number): Promise<number> {
  const ready = a.plane.cp.waitFor('node-a', shardIs(id, ShardState.READY), 30_000);
  a.plane.cp.send('node-a', { case: 'start', value: simStart(id, await freePort(), { gpu }) });
  return ((await ready).msg.value as ShardStatus).pid;
}

/** Whether the shard's state file records a drain (what the next agent brings back DRAINING). */
function drainRecorded(a: Stoppable, id: string): boolean {
  return (JSON.parse(readFileSync(join(a.dirs.stateDir, 'shards', `${id}.json`), 'utf8')) as { drainRequested?: boolean }).drainRequested === true;
}

/** Sends SIGTERM with the stop held open; resolves once the agent has said it is stopping. */
async function stopHeld(a: Stoppable, agent: Awaited<ReturnType<Stoppable['spawn']>>): Promise<void> {
  // The wait under way hangs first (its marker says so), so the stop cannot slip past it.
  appendFileSync(a.control, 'hang\n');
  await until(() => existsSync(`${a.control}.hanging`), 'the fake NVML event wait to hang');
  // process.kill, not child.kill: execa's kill() follows SIGTERM with SIGKILL 5 s later (forceKillAfterDelay), which would end the held stop.
  process.kill(agent.child.pid as number, 'SIGTERM');
  await until(() => agent.records.some((r) => r.msg === STOPPING_LINE), `the agent's "${STOPPING_LINE}" line`);
}

describe.skipIf(unavailable)('a ctl change while the agent stops', () => {
  it('is refused in one line with exit 69 while status still answers; a drain asked just before SIGTERM is kept, the engines untouched', async () => {
    const a = await stoppableAgent();
    const first = await a.spawn();
    const keptPid = await readyShard(a, 'kept', 0);
    const latePid = await readyShard(a, 'late', 1);

    // The look-alike: a change just before SIGTERM is done, and said to be.
    const before = await a.ctl('drain', 'kept');
    expect(before.exitCode, before.stderr).toBe(0);

    await stopHeld(a, first);
    const status = await a.ctl('status', '--json');
    const logs = await a.ctl('logs', 'kept', '-n', '5');
    const drain = await a.ctl('drain', 'late');
    const cordon = await a.ctl('cordon', '--reason', 'asked while stopping');
    const adopt = await a.ctl('adopt');
    // Reads are answered as long as the socket is open (here: the whole held stop).
    expect(status.exitCode, status.stderr).toBe(0);
    expect((JSON.parse(status.stdout) as { shards: { shardId: string }[] }).shards.map((s) => s.shardId).sort()).toEqual(['kept', 'late']);
    expect(logs.exitCode, logs.stderr).toBe(0);
    expect(logs.stdout).not.toBe('');
    // Every change is refused before it is acted on: one line, exit 69 (the agent is going away; retry once it is back).
    for (const [r, method] of [[drain, 'Drain'], [cordon, 'Cordon'], [adopt, 'Adopt']] as const) {
      expect(r.exitCode, r.stderr).toBe(69);
      expect(r.stderr.trim()).toBe(`error: the agent is stopping: ${method} refused, nothing was changed; try again after it restarts`);
      expect(r.stdout).toBe('');
    }

    writeFileSync(a.control, '');
    expect(await first.exited).toBe(0);
    expect(first.records.some((r) => r.msg === 'agent stopped')).toBe(true);
    // Once it is gone, a read fails cleanly: one line, exit 69.
    const gone = await a.ctl('status');
    expect(gone.exitCode).toBe(69);
    expect(gone.stderr.trim().split('\n')).toHaveLength(1);
    // Engines outlive the agent.
    expect([isRunning(keptPid), isRunning(latePid)]).toEqual([true, true]);

    const second = await a.spawn();
    const running = Object.fromEntries(second.register.runningShards.map((s) => [s.shardId, s.state]));
    // What the next agent reads: the drain asked before SIGTERM, and nothing of what was refused.
    expect(Object.keys(running).sort()).toEqual(['kept', 'late']);
    expect(running.kept).toBe(ShardState.DRAINING);
    expect(running.late).not.toBe(ShardState.DRAINING);
    expect([drainRecorded(a, 'kept'), drainRecorded(a, 'late')]).toEqual([true, false]);
    expect(existsSync(join(a.dirs.stateDir, 'cordon.json'))).toBe(false);
    expect(second.register.runningShards.map((s) => [s.shardId, s.pid]).sort()).toEqual([['kept', keptPid], ['late', latePid]]);
  }, 120_000); // two agents, two engines and seven ctl runs: a safety net for a loaded machine, not a speed bound
});
