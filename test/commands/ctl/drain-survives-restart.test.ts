import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type RunningShard, ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../../helpers/agent-process.js';
import { freePort, isRunning, until } from '../../helpers/engine-processes.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

/*
 * Issue 20's acceptance: a drain outlives the agent (kill -9 included), is
 * reported in Register, holds until `ctl drain --cancel`, and the cancel
 * reaches the control plane as READY.
 */

const pidOf = (m: AgentMessage) => (m.msg.value as { pid: number }).pid;
const stateFile = (stateDir: string, id: string) => JSON.parse(readFileSync(join(stateDir, 'shards', `${id}.json`), 'utf8')) as Record<string, unknown>;

describe('a drained shard across an agent restart', () => {
  it('comes back DRAINING after kill -9, listed so in Register, until ctl drain --cancel makes it READY on the stream', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-drain-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    const first = startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);
    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', port) });
    const pid = pidOf(await ready);

    const draining = cp.waitFor('node-a', shardIs('s1', ShardState.DRAINING), 10_000);
    const drain = await runCli(['ctl', 'drain', 's1', '--socket', dirs.socket]);
    expect(drain.exitCode, drain.stderr).toBe(0);
    await draining;
    // On disk before ctl drain returned: a kill -9 right after it must not lose it.
    expect(stateFile(dirs.stateDir, 's1').drainRequested).toBe(true);

    first.kill('SIGKILL');
    await first.exited;
    expect(isRunning(pid)).toBe(true);

    const reRegistered = cp.waitFor('node-a', isRegister, 20_000);
    const second = startAgentProcess({ server: url, dirs });
    const reg = (await reRegistered).msg.value as { runningShards: RunningShard[] };
    expect(reg.runningShards.map((s) => [s.shardId, s.pid, ShardState[s.state]])).toEqual([['s1', pid, 'DRAINING']]);

    // The adopted engine settles (proves it serves) into DRAINING, never READY.
    await until(
      () => second.logs().some((r) => r.msg === 'shard state changed' && r.shard === 's1' && r.to === 'DRAINING'),
      'the adopted shard to settle DRAINING',
      30_000,
    );
    // A few health intervals (500 ms) in which nothing may make it READY.
    await new Promise((r) => setTimeout(r, 2000));
    const seen = cp.messages('node-a');
    const sinceRegister = seen.slice(seen.map(isRegister).lastIndexOf(true));
    expect(sinceRegister.filter(shardIs('s1', ShardState.READY))).toEqual([]);
    const status = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(status.exitCode, status.stderr).toBe(0);
    const shards = (JSON.parse(status.stdout) as { shards: { shardId: string; state: string }[] }).shards;
    expect(shards.map((s) => [s.shardId, s.state])).toEqual([['s1', 'SHARD_STATE_DRAINING']]);

    const readyAgain = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 10_000);
    const cancel = await runCli(['ctl', 'drain', '--cancel', 's1', '--socket', dirs.socket]);
    expect(cancel.exitCode, cancel.stderr).toBe(0);
    expect(cancel.stdout).toMatch(/^s1: READY$/m);
    expect(pidOf(await readyAgain)).toBe(pid);
    expect(stateFile(dirs.stateDir, 's1').drainRequested).toBe(false);

    // Cancelling again is refused, naming the state.
    const again = await runCli(['ctl', 'drain', '--cancel', 's1', '--socket', dirs.socket]);
    expect(again.exitCode).toBe(1);
    expect(again.stderr).toMatch(/shard s1 is READY: only a DRAINING shard can have its drain cancelled/);
  });

  it('refuses --cancel with --wait as a usage error', async () => {
    const r = await runCli(['ctl', 'drain', '--cancel', '--wait', 's1', '--socket', '/nonexistent/agent.sock']);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/--wait|--cancel/);
  });
});
