import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { parseDeployment } from '../../../src/control/load-deployment.js';
import { ShardState, type ShardStatus } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { shardStateDir } from '../../../src/lib/shard-layout.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../../helpers/agent-process.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { runCli } from '../../helpers/run-cli.js';
import { isRegister } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';

/*
 * Issue 28's crash history, through the real agent and the reference
 * control plane: a replica whose engine dies soon after READY, 20 times,
 * each retry under a new shard id. The crashed generations' logs stay
 * readable (by id, and as --previous of the replica), ctl status lists only
 * the live shard unless --all, the agent keeps at most keep_terminal_shards
 * ended shards and their state files, and the retries back off.
 */

const CRASHY = parseDeployment(
  `
profiles:
  crashy:
    engine: sim
    model: sim/crashy
    served_model_name: crashy
    args: [--load-time, 50ms, --fail-after, 100ms, --exit-code, '3']
    startup_timeout: 1m
replicas:
  - name: crashy
    profile: crashy
`,
  'crashy.yaml',
);

const KEEP = 4;
// 40 in the issue; 20 (five times KEEP) shows the same bound at half the time on a loaded 2-core machine.
const CRASHES = 20;

function portRange(): [number, number] {
  const first = 21_000 + Math.floor(Math.random() * 400) * 20;
  return [first, first + 19];
}

interface ShardJson {
  shardId: string;
  state: string;
}
const shardsOf = (stdout: string) => (JSON.parse(stdout) as { shards?: ShardJson[] }).shards ?? [];

describe('crash history', () => {
  it('after 20 crashes: logs of crashed generations by id and as --previous of the replica, ctl status live-only unless --all, state dir bounded, retries backed off', async () => {
    const cpLog = captureLogger('info');
    const { cp, url } = await startControlPlane({ deployment: CRASHY, retryBackoffMs: 20, maxRetryBackoffMs: 80, portRange: portRange(), logger: cpLog.logger });
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-crash-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    startAgentProcess({ server: url, dirs, supervisor: [`keep_terminal_shards: ${KEEP}`, 'terminal_retention: 1h'] });
    await cp.waitFor('node-a', isRegister, 20_000);

    // Each generation's end, with the pid that ran it: FAILED with exit code 3.
    const failed: { shardId: string; pid: number }[] = [];
    const started = new Map<string, number>();
    await new Promise<void>((resolve) => {
      const onStatus = (_node: string, st: ShardStatus) => {
        if (st.state === ShardState.READY) started.set(st.shardId, st.pid);
        if (st.state !== ShardState.FAILED || failed.some((f) => f.shardId === st.shardId)) return;
        failed.push({ shardId: st.shardId, pid: st.pid || (started.get(st.shardId) ?? 0) });
        if (failed.length >= CRASHES) {
          cp.off('shard-status', onStatus);
          resolve();
        }
      };
      cp.on('shard-status', onStatus);
    });
    expect(new Set(failed.map((f) => f.shardId)).size).toBe(CRASHES);
    const socket = ['--socket', dirs.socket];

    const first = failed[0] as { shardId: string; pid: number };
    const [, second, third] = failed as { shardId: string; pid: number }[];
    // Every ctl call at once: the replica keeps crashing meanwhile (each answer is judged alone), and each
    // second spent on them one after another was another engine started, crashed and placed again.
    const [byId, prev, byReplica, live, all, onlyFailed, table] = await Promise.all([
      runCli(['ctl', 'logs', first.shardId, '-n', '20', ...socket]),
      runCli(['ctl', 'logs', (third as { shardId: string }).shardId, '--previous', ...socket]),
      runCli(['ctl', 'logs', '--previous', '--replica', 'crashy-0', '--timestamps', ...socket]),
      runCli(['ctl', 'status', '--json', ...socket]),
      runCli(['ctl', 'status', '--all', '--json', ...socket]),
      runCli(['ctl', 'status', '--state', 'failed', '--json', ...socket]),
      runCli(['ctl', 'status', ...socket]),
    ]);

    // The first generation is long forgotten by the agent; its log is kept and read by id.
    expect(byId.exitCode, byId.stderr).toBe(0);
    expect(byId.stdout).toContain(`pid ${first.pid}`);
    expect(byId.stdout).toMatch(/exiting with 3/);

    // --previous of a generation: the same replica's run before it, under another shard id.
    expect(prev.exitCode, prev.stderr).toBe(0);
    expect(prev.stdout).toContain(`pid ${second?.pid}`);
    expect(prev.stdout).not.toContain(`pid ${third?.pid}`);
    // And by replica: the run before its newest one has crashed, whichever generation that is.
    expect(byReplica.exitCode, byReplica.stderr).toBe(0);
    expect(byReplica.stdout).toMatch(/exiting with 3/);
    expect(byReplica.stdout).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z INFO /m);

    // ctl status: no ended shard whose engine is gone unless --all; --all shows at most KEEP of them.
    expect(live.exitCode, live.stderr).toBe(0);
    const ended = shardsOf(all.stdout).filter((s) => ['SHARD_STATE_FAILED', 'SHARD_STATE_EXITED', 'SHARD_STATE_STOPPED'].includes(s.state));
    expect(ended.length).toBeGreaterThan(0);
    expect(ended.length).toBeLessThanOrEqual(KEEP);
    // These engines all exited.
    expect(shardsOf(live.stdout).filter((s) => ['SHARD_STATE_FAILED', 'SHARD_STATE_EXITED', 'SHARD_STATE_STOPPED'].includes(s.state))).toEqual([]);
    expect(shardsOf(onlyFailed.stdout).every((s) => s.state === 'SHARD_STATE_FAILED')).toBe(true);
    expect(shardsOf(onlyFailed.stdout).length).toBeGreaterThan(0);
    expect(table.stdout).toContain('not listed: ctl status --all');
    expect(table.stdout).not.toContain(first.shardId);

    // The state directory holds the ended shards kept and at most the live one, not one file per crash.
    const stateFiles = readdirSync(shardStateDir(dirs.stateDir)).filter((n) => n.endsWith('.json'));
    expect(stateFiles.length).toBeLessThanOrEqual(KEEP + 1);

    // The retries slowed down: 20 ms doubling to the 80 ms cap, said in a crash-looping line with the count.
    const looping = cpLog.records.filter((r) => String(r.msg).includes('is crash-looping'));
    expect(looping.length).toBeGreaterThan(0);
    const delays = looping.map((r) => r.retryInMs as number);
    expect(delays[0]).toBe(80);
    expect(looping.map((r) => r.failures)).toContain(CRASHES);
    expect(String(looping[0]?.msg)).toMatch(/^crashy-0 is crash-looping: 3 failures in a row, the last: .*; placing it again in 80ms/);
  }, 300_000);
});
