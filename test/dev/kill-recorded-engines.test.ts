import { create } from '@bufbuild/protobuf';
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { readProcessIdentity } from '../helpers/read-process-identity.js';
import { writeStateFile } from '../../src/lib/files/state-file.js';
import { killRecordedEngines, waitEnginesGone } from '../../src/dev/kill-recorded-engines.js';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardStatePath } from '../../src/lib/shard-layout.js';
import { isRunning } from '../helpers/engine-processes.js';
import { parseShardId, parseStartShard } from '../../src/lib/shard-id.js';

function dirs() {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-kill-recorded-'));
  const d = { stateDir: join(root, 'state'), logDir: join(root, 'log') };
  mkdirSync(join(d.stateDir, 'shards'), { recursive: true });
  mkdirSync(join(d.logDir, 'shards'), { recursive: true });
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return d;
}

/** A stand-in engine: its own process group, like the supervisor's; killed after the test whatever happens. */
function engine(stdoutFile?: string): number {
  const fd = stdoutFile ? openSync(stdoutFile, 'a') : 'ignore';
  const child = spawn('sleep', ['300'], { detached: true, stdio: ['ignore', fd, fd] });
  if (typeof fd === 'number') closeSync(fd);
  const pid = child.pid as number;
  onTestFinished(() => {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {}
  });
  return pid;
}

async function record(stateDir: string, shardId: string, pid: number, startTime: string): Promise<void> {
  await writeStateFile(shardStatePath(stateDir, shardId), {
    schemaVersion: 1,
    shardId: parseShardId(shardId),
    replicaId: 'r',
    spec: parseStartShard(create(StartShardSchema, { shardId, replicaId: 'r' })),
    servesHttp: false,
    inFlightMetric: '',
    pid,
    pgid: pid,
    identity: { startTime, bootId: readProcessIdentity(process.pid)?.bootId as string },
    launcher: 'direct',
    logPath: '',
    createdAtMs: Date.now(),
  });
}

describe('killRecordedEngines', () => {
  it('kills the process group of a recorded engine whose start time matches', async () => {
    const d = dirs();
    const pid = engine();
    await record(d.stateDir, 's1', pid, readProcessIdentity(pid)?.startTime as string);
    const killed = killRecordedEngines(d);
    expect(killed).toEqual([{ shardId: 's1', pgid: pid, evidence: 'state-file' }]);
    expect(await waitEnginesGone(killed, 5_000)).toBe(true);
    expect(isRunning(pid)).toBe(false);
  });

  it('never signals a recorded pid that now has another start time (a reused pid)', async () => {
    const d = dirs();
    const pid = engine();
    await record(d.stateDir, 's1', pid, '1');
    expect(killRecordedEngines(d)).toEqual([]);
    expect(isRunning(pid)).toBe(true);
  });

  it('kills a process writing to a shard log that no state file records', async () => {
    const d = dirs();
    const pid = engine(join(d.logDir, 'shards', 's2.log'));
    const killed = killRecordedEngines(d);
    expect(killed).toEqual([{ shardId: 's2', pid, evidence: 'shard-log' }]);
    expect(await waitEnginesGone(killed, 5_000)).toBe(true);
  });
});
