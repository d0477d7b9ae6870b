import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ctlStatus } from '../../src/ctl/ctl-status.js';
import { type AgentDirs, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { BIN, runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { leaveStaleSocket } from '../helpers/stale-socket.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

function newDirs(): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-agent-sock-')));
  onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
  cleanUpEnginesAfterTest(dirs);
  return dirs;
}

describe('llmgw agent run and its admin socket', () => {
  it('answers on the socket by the time it first registers', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    startAgentProcess({ server: url, dirs });
    await registered;
    expect((await ctlStatus(dirs.socket)).nodeId).toBe('node-a');
  });

  it('replaces a stale socket file left by an agent killed with -9', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    await leaveStaleSocket(dirs.socket);
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const agent = startAgentProcess({ server: url, dirs });
    await registered;
    expect((await ctlStatus(dirs.socket)).nodeId).toBe('node-a');
    expect(agent.logs().some((r) => r.msg === 'removed a stale admin socket nobody was listening on')).toBe(true);
  });

  it('refuses to start a second agent on the same state directory: exit 1, one line naming the first, which keeps serving', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const first = startAgentProcess({ server: url, dirs });
    await registered;
    // The same configuration, as a second `systemctl start` or a stray manual run would have.
    const second = await runCli(['agent', 'run', '--config', first.configPath]);
    expect(second.exitCode).toBe(1);
    expect(second.stderr).toBe(
      `error: another agent (pid ${first.pid}) is running with supervisor.state_dir ${dirs.stateDir}; stop it first (systemctl stop llmgw-agent) or give this one its own state_dir`,
    );
    expect((await ctlStatus(dirs.socket)).pid).toBe(first.pid);
  });

  it('refuses a second agent with its own state directory on the same socket: exit 1, one line saying so', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const first = startAgentProcess({ server: url, dirs });
    await registered;
    const other = { ...agentDirs(join(dirs.root, 'other')), socket: dirs.socket };
    const config = readFileSync(first.configPath, 'utf8').replace(`state_dir: ${dirs.stateDir}`, `state_dir: ${other.stateDir}`).replace(`log_dir: ${dirs.logDir}`, `log_dir: ${other.logDir}`);
    const configPath = join(dirs.root, 'other.yaml');
    writeFileSync(configPath, config);
    const second = await runCli(['agent', 'run', '--config', configPath]);
    expect(second.exitCode).toBe(1);
    expect(second.stderr).toBe(
      `error: another agent is already listening on ${dirs.socket}; stop it first (systemctl stop llmgw-agent) or give this one another admin.socket`,
    );
    expect((await ctlStatus(dirs.socket)).pid).toBe(first.pid);
  });

  it('lets exactly one of two agents started together over a stale socket run (review finding 13)', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    // Both starters find it stale.
    await leaveStaleSocket(dirs.socket);
    let registers = 0;
    cp.on('message', (_node, m) => {
      if (isRegister(m)) registers += 1;
    });
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const a = startAgentProcess({ server: url, dirs });
    const b = startAgentProcess({ server: url, dirs });
    await registered;
    const loser = await Promise.race([a.exited.then(() => a), b.exited.then(() => b)]);
    const winner = loser === a ? b : a;
    expect((await loser.exited).exitCode).toBe(1);
    expect(loser.logs().some((r) => /is running with supervisor\.state_dir|already listening/.test(String(r.msg ?? r.err)))).toBe(true);
    // The winner still runs, answers on the socket, and is the only one that registered.
    await new Promise((r) => setTimeout(r, 1000));
    expect(isRunning(winner.pid)).toBe(true);
    expect((await ctlStatus(dirs.socket)).pid).toBe(winner.pid);
    expect(registers).toBe(1);
  });

  it('starts at once after the agent before it was sent SIGTERM, without waiting for it to be gone', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const first = startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);
    const registeredAgain = cp.waitFor('node-a', isRegister, 20_000);
    first.kill('SIGTERM');
    const second = startAgentProcess({ server: url, dirs });
    await registeredAgain;
    expect((await first.exited).exitCode).toBe(0);
    await until(async () => (await ctlStatus(dirs.socket).catch(() => undefined))?.pid === second.pid, 'the second agent to answer ctl status');
  });

  it('removes the socket and exits 0 on SIGTERM, also while a ctl logs -f and a silent client are connected', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const agent = startAgentProcess({ server: url, dirs });
    await registered;
    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', await freePort()) });
    await ready;
    const follow = execa(process.execPath, [BIN, 'ctl', 'logs', 's1', '-f', '--socket', dirs.socket], { reject: false, stdin: 'ignore' });
    onTestFinished(async () => {
      follow.kill('SIGKILL');
      await follow;
    });
    let followed = '';
    follow.stdout?.on('data', (d: Buffer) => {
      followed += d.toString();
    });
    await until(() => followed.includes('Uvicorn running on'), 'ctl logs -f to print the tail');
    const silent = (await import('node:net')).connect(dirs.socket);
    silent.on('error', () => {});
    silent.resume();
    onTestFinished(() => {
      silent.destroy();
    });
    const status = await runCli(['ctl', 'status', '--socket', dirs.socket]);
    expect(status.exitCode).toBe(0);

    const sentAt = Date.now();
    agent.kill('SIGTERM');
    const exit = await agent.exited;
    console.info(`agent with an admin socket exited ${exit.atMs - sentAt} ms after SIGTERM`);
    expect(exit.exitCode).toBe(0);
    expect(existsSync(dirs.socket)).toBe(false);
    await until(() => silent.destroyed || silent.readableEnded, 'the silent client to be disconnected');
    const after = await runCli(['ctl', 'status', '--socket', dirs.socket]);
    expect(after.exitCode).toBe(69);
    const followExit = await follow;
    expect(followExit.exitCode).toBe(69);
    expect(followExit.stderr).toContain('the agent is stopping; the log can still be read from its file');
  });
});
