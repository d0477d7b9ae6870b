import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Walkthrough 3: a shard that failed before an agent restart was forgotten
 * by it; `ctl status --all` after an upgrade showed none of the crashes.
 * Now it is kept FAILED, with its failure record's reason, and no engine is
 * watched, signalled or reported for it again beyond the recovery's report.
 */

interface ShardJson {
  shardId: string;
  state: string;
  error: string;
  exitCode?: number;
}
const shardsOf = (stdout: string) => (JSON.parse(stdout) as { shards?: ShardJson[] }).shards ?? [];

describe('a shard that ended before an agent restart', () => {
  it('is still listed FAILED by ctl status --all after it, with the reason and exit code it failed with, and only then', async () => {
    const { cp, url } = await startControlPlane();
    onTestFinished(() => cp.close());
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-ended-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    const first = startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);
    const failed = cp.waitFor('node-a', shardIs('crash-1', ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('crash-1', await freePort(), { args: ['--load-time', '50ms', '--fail-after', '100ms', '--exit-code', '3'] }) });
    const before = (await failed).msg.value as { error: string; exitCode: number };
    expect(before.error).toMatch(/^engine exited with code 3/);

    first.kill('SIGKILL');
    await first.exited;
    startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);
    const all = await runCli(['ctl', 'status', '--all', '--json', '--socket', dirs.socket]);
    expect(all.exitCode, all.stderr).toBe(0);
    expect(shardsOf(all.stdout).find((s) => s.shardId === 'crash-1')).toMatchObject({ state: 'SHARD_STATE_FAILED', error: before.error, exitCode: 3 });
    // Ended shards are not the live view's.
    const live = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(shardsOf(live.stdout).some((s) => s.shardId === 'crash-1')).toBe(false);
    // A new start under the id relaunches it as after any failure.
    const again = cp.waitFor('node-a', shardIs('crash-1', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('crash-1', await freePort()) });
    expect(((await again).msg.value as { state: ShardState }).state).toBe(ShardState.READY);
  }, 120_000);
});
