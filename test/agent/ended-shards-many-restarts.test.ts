import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardFailurePath, shardStatePath } from '../../src/lib/shard-layout.js';
import { type AgentDirs, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Walkthrough 4, O3: FAILED shards outlived one agent restart, not two: the
 * first restart kept them in memory and deleted their state files, so the
 * second forgot every crash (an upgrade is often two restarts), and the
 * FAILED alert resolved by itself. Now the record stays until
 * supervisor.terminal_retention from the shard's end, whatever the restarts.
 */

interface ShardJson {
  shardId: string;
  state: string;
  error: string;
  exitCode?: number;
}

async function allShards(dirs: AgentDirs): Promise<ShardJson[]> {
  const out = await runCli(['ctl', 'status', '--all', '--json', '--socket', dirs.socket]);
  expect(out.exitCode, out.stderr).toBe(0);
  return (JSON.parse(out.stdout) as { shards?: ShardJson[] }).shards ?? [];
}

async function setUp() {
  const { cp, url } = await startControlPlane();
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-ended-many-')));
  onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
  cleanUpEnginesAfterTest(dirs);
  /** Starts the agent and waits for its Register. */
  const start = async () => {
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    const agent = startAgentProcess({ server: url, dirs });
    await registered;
    return agent;
  };
  /** A shard whose sim engine exits with code 3 soon after READY; its FAILED status. */
  const crash = async (id: string) => {
    const failed = cp.waitFor('node-a', shardIs(id, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart(id, await freePort(), { args: ['--load-time', '50ms', '--fail-after', '100ms', '--exit-code', '3'] }) });
    return (await failed).msg.value as ShardStatus;
  };
  return { cp, dirs, start, crash };
}

describe('FAILED shards across agent restarts (walkthrough 4, O3)', () => {
  it('are listed FAILED after each of three restarts, a crash under the agent and an engine that died while it was down alike', async () => {
    const { cp, dirs, start, crash } = await setUp();
    let agent = await start();
    const before = await crash('crash-1');
    expect(before.error).toMatch(/^engine exited with code 3/);
    // An engine that dies while no agent runs: found dead by the next one, with no failure record of its own.
    const ready = cp.waitFor('node-a', shardIs('gone-1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('gone-1', await freePort()) });
    const pid = ((await ready).msg.value as ShardStatus).pid;
    agent.kill('SIGTERM');
    await agent.exited;
    process.kill(pid, 'SIGKILL');
    await until(() => !isRunning(pid), 'the engine gone while the agent is down');

    let goneError = '';
    for (const restart of [1, 2, 3]) {
      agent = await start();
      const shards = await allShards(dirs);
      expect(shards.find((s) => s.shardId === 'crash-1'), `crash-1 after restart ${restart}`).toMatchObject({ state: 'SHARD_STATE_FAILED', error: before.error, exitCode: 3 });
      const gone = shards.find((s) => s.shardId === 'gone-1');
      expect(gone, `gone-1 after restart ${restart}`).toMatchObject({ state: 'SHARD_STATE_FAILED', error: expect.stringMatching(/^engine ended while the agent was down/) });
      // The same record each time: what the first restart found, not a new story per restart.
      if (restart === 1) goneError = gone?.error ?? '';
      else expect(gone?.error).toBe(goneError);
      // The record written for it dates its run from its state file, so ctl logs --previous orders it among the replica's runs.
      const record = JSON.parse(readFileSync(shardFailurePath(dirs.logDir, 'gone-1'), 'utf8')) as { startedAt: string; at: string };
      expect(Date.parse(record.startedAt)).toBeGreaterThan(0);
      expect(Date.parse(record.at)).toBeGreaterThanOrEqual(Date.parse(record.startedAt));
      agent.kill('SIGTERM');
      await agent.exited;
    }
  }, 180_000);

  it('look-alike: one that ended longer than terminal_retention ago is forgotten, and a restart does not renew it', async () => {
    const { dirs, start, crash } = await setUp();
    let agent = await start();
    await crash('old-1');
    agent.kill('SIGTERM');
    await agent.exited;
    // As if it had ended two hours ago (the default retention is an hour).
    const record = shardFailurePath(dirs.logDir, 'old-1');
    writeFileSync(record, JSON.stringify({ ...JSON.parse(readFileSync(record, 'utf8')), at: new Date(Date.now() - 2 * 3_600_000).toISOString() }));
    agent = await start();
    // Kept at the restart, then collected at the next terminal transition (another crash) by its recorded end.
    await crash('new-1');
    await until(async () => !(await allShards(dirs)).some((s) => s.shardId === 'old-1'), 'old-1 forgotten');
    expect(existsSync(shardStatePath(dirs.stateDir, 'old-1'))).toBe(false);
    agent.kill('SIGTERM');
    await agent.exited;
    await start();
    const shards = await allShards(dirs);
    expect(shards.map((s) => s.shardId)).toEqual(['new-1']);
  }, 180_000);
});
