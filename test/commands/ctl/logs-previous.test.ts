import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus } from '../../../src/gen/llmgw/v1/agent_pb.js';
import type { FailureRecord } from '../../../src/lib/files/failure-record.js';
import { previousRunFailurePath, previousRunLogPath, shardFailurePath } from '../../../src/lib/shard-layout.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../../helpers/agent-process.js';
import { freePort } from '../../helpers/engine-processes.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

/*
 * Issue 16's acceptance for crash evidence: a shard that crashes, is started
 * again by the control plane under the same id and crashes again leaves both
 * runs readable: `ctl logs` the current (second) run, `ctl logs --previous`
 * the one before it, each with its failure record, also with the agent down.
 */

const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
const readRecord = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as FailureRecord;

describe('ctl logs --previous', () => {
  it('shows the crashed run before the current one, after a restart under the same id crashed too; with the agent down as well', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-prev-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    const agent = startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);
    const port = await freePort();
    // Serves, then dies the way a CUDA fault kills vLLM.
    const spec = simStart('s1', port, { args: ['--load-time', '200ms', '--fail-after', '2s', '--exit-code', '3'] });

    const runs: number[] = [];
    for (let run = 1; run <= 2; run++) {
      const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
      const failed = cp.waitFor('node-a', shardIs('s1', ShardState.FAILED), 30_000);
      cp.send('node-a', { case: 'start', value: spec });
      runs.push(statusOf(await ready).pid);
      expect(statusOf(await failed).exitCode).toBe(3);
    }
    const [firstPid, secondPid] = runs;
    expect(firstPid).not.toBe(secondPid);

    const current = await runCli(['ctl', 'logs', 's1', '--socket', dirs.socket]);
    expect(current.exitCode, current.stderr).toBe(0);
    expect(current.stdout).toContain(`pid ${secondPid}`);
    expect(current.stdout).not.toContain(`pid ${firstPid}`);

    const previous = await runCli(['ctl', 'logs', 's1', '--previous', '--socket', dirs.socket]);
    expect(previous.exitCode, previous.stderr).toBe(0);
    expect(previous.stdout).toContain(`pid ${firstPid}`);
    expect(previous.stdout).not.toContain(`pid ${secondPid}`);
    expect(previous.stdout).toMatch(/Engine core died unexpectedly; exiting with 3/);

    // Each run's failure record: the current one beside its log, the previous one moved with its log.
    const now = readRecord(shardFailurePath(dirs.logDir, 's1'));
    const before = readRecord(previousRunFailurePath(dirs.logDir, 's1', 1));
    expect([before.pid, before.exitCode, before.signal]).toEqual([firstPid, 3, null]);
    expect([now.pid, now.exitCode]).toEqual([secondPid, 3]);
    expect(before.error).toBe('engine exited with code 3');
    expect(before.lastOutput.join('\n')).toMatch(/exiting with 3/);
    expect(Date.parse(before.at)).toBeLessThanOrEqual(Date.parse(now.at));
    expect(existsSync(previousRunLogPath(dirs.logDir, 's1', 2))).toBe(false);

    // The agent is gone: ctl reads the kept file itself and says so.
    agent.kill('SIGKILL');
    await agent.exited;
    const offline = await runCli(['ctl', 'logs', 's1', '--previous', '--socket', dirs.socket, '--log-dir', dirs.logDir]);
    expect(offline.exitCode, offline.stderr).toBe(0);
    expect(offline.stderr).toContain(`reading ${previousRunLogPath(dirs.logDir, 's1', 1)} directly`);
    expect(offline.stdout).toContain(`pid ${firstPid}`);
  });

  it('says so when no previous run is kept, and refuses --previous with --follow', async () => {
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-prev-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    const none = await runCli(['ctl', 'logs', 'never-ran', '--previous', '--socket', dirs.socket, '--log-dir', dirs.logDir]);
    expect(none.exitCode).toBe(1);
    expect(none.stderr).toMatch(/no previous run of shard never-ran is kept at /);
    const both = await runCli(['ctl', 'logs', 's1', '--previous', '-f', '--socket', dirs.socket, '--log-dir', dirs.logDir]);
    expect(both.exitCode).toBe(2);
  });
});
