import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardLogPath } from '../../src/lib/shard-layout.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { copyCliForNobody } from '../helpers/copy-cli-for-nobody.js';
import { freePort, isRunning, processesWritingUnder, until } from '../helpers/engine-processes.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;

/** A field of /proc/<pid>/status ("Uid", "Gid", "Groups"), as the kernel wrote it. */
function procStatus(pid: number, field: string): string {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  if (line === undefined) throw new Error(`no ${field} in /proc/${pid}/status`);
  return line.slice(field.length + 1).trim();
}

const environOf = (pid: number) => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');

describe.skipIf(process.geteuid?.() !== 0)('engines.<name>.user (run as root)', () => {
  it('runs the engine as nobody with no supplementary group and its HOME, logs it, adopts it after kill -9 and stops it', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-user-');
    const cli = copyCliForNobody();
    onTestFinished(() => rmSync(cli, { recursive: true, force: true }));
    // The engine runs the copy; the agent still runs from the checkout, as root.
    const command = JSON.stringify([process.execPath, join(cli, 'bin', 'run.js'), 'sim', 'engine']);
    const extraYaml = `engines:\n  sim:\n    user: nobody\n    command: ${command}\n`;
    const first = startAgentProcess({ server: url, dirs, extraYaml });
    await cp.waitFor('node-a', isRegister, 20_000);

    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', port) });
    const pid = statusOf(await ready).pid;

    // Real, effective, saved and filesystem uid all nobody's: nothing of root is left to regain.
    expect(procStatus(pid, 'Uid').split(/\s+/)).toEqual(['65534', '65534', '65534', '65534']);
    expect(procStatus(pid, 'Gid').split(/\s+/)).toEqual(['65534', '65534', '65534', '65534']);
    expect(procStatus(pid, 'Groups')).toBe('');
    const env = environOf(pid);
    expect(env).toContain('HOME=/nonexistent');
    expect(env).toContain('USER=nobody');
    // The log fd was opened by root and inherited: the engine's output is there, the file root's.
    const logPath = shardLogPath(dirs.logDir, 's1');
    await until(() => readFileSync(logPath, 'utf8').length > 0, 'the engine writing its log');
    expect(statSync(logPath).uid).toBe(0);

    // Adoption: the new agent must count a nobody-owned writer of the log as the engine.
    first.kill('SIGKILL');
    await first.exited;
    expect(isRunning(pid)).toBe(true);
    const reRegistered = cp.waitFor('node-a', isRegister, 20_000);
    const second = startAgentProcess({ server: url, dirs, extraYaml });
    const reg = (await reRegistered).msg.value as { runningShards: { shardId: string; pid: number }[] };
    expect(reg.runningShards.map((s) => [s.shardId, s.pid])).toEqual([['s1', pid]]);
    expect(processesWritingUnder(dirs.logDir)).toEqual([pid]);

    const stopped = cp.waitFor('node-a', shardIs('s1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 's1' }) });
    await stopped;
    await until(() => !isRunning(pid), 'the engine gone after the stop');
    expect(processesWritingUnder(dirs.logDir)).toEqual([]);
    await second.stop();
  });
});
