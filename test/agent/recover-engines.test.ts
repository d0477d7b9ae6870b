import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, constants, mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RecoverEngines } from '../../src/agent/recover-engines.js';
import type { ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { silentLogger } from '../../src/lib/logger.js';
import { readProcStat } from '../../src/lib/process/proc-stat.js';
import { isRunning, until } from '../helpers/engine-processes.js';
import { useSupervisors } from '../helpers/use-supervisors.js';

const harness = useSupervisors();

/** An engine a previous agent left with no state file: it writes `<id>.log` and ignores SIGTERM. */
function strayEngine(id: string): ChildProcess {
  const dir = join(harness.dirs.logDir, 'shards');
  mkdirSync(dir, { recursive: true });
  const fd = openSync(join(dir, `${id}.log`), constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT, 0o640);
  try {
    const child = spawn('setsid', ['sh', '-c', 'trap "" TERM; exec sleep 1000'], { stdio: ['ignore', fd, fd] });
    child.unref();
    harness.extraGroups.push(child.pid as number);
    return child;
  } finally {
    closeSync(fd);
  }
}

describe('RecoverEngines', () => {
  it('reports an engine still running after SIGKILL and its wait limit as FAILED and carries on (SIGKILL intercepted, standing in for uninterruptible sleep)', async () => {
    const stuck = strayEngine('stuck');
    const other = strayEngine('other');
    await until(() => readProcStat(stuck.pid as number)?.comm === 'sleep' && readProcStat(other.pid as number)?.comm === 'sleep', 'the engines to run');
    const intercepted: number[] = [];
    const sup = harness.newSupervisor(
      { stopGraceMs: 200 },
      {
        // The one process whose SIGKILL "does not take": the kernel cannot be
        // asked for a D-state process here, so the signal is dropped instead.
        signalOrphanGroup: (pgid, sig) => {
          if (pgid === stuck.pid && sig === 'SIGKILL') intercepted.push(pgid);
          else process.kill(-pgid, sig);
        },
      },
    );
    const reports: ShardStatus[] = [];
    const recovery = new RecoverEngines({
      nodeId: 'n',
      supervisor: sup,
      adoptReadyTimeoutMs: 1000,
      settle: async () => {},
      report: (s) => reports.push(s),
      logger: silentLogger,
      killWaitMs: 300,
    });
    const results = await recovery.recover();

    expect(intercepted).toEqual([stuck.pid]);
    const byId = new Map(results.map((r) => [r.shardId, r]));
    expect(byId.get('other')?.outcome).toBe('killed');
    expect(byId.get('stuck')?.outcome).toBe('error');
    expect(byId.get('stuck')?.reason).toMatch(`process group ${stuck.pid} still runs 300ms after SIGKILL`);
    const report = reports.find((r) => r.shardId === 'stuck');
    expect(report?.state).toBe(ShardState.FAILED);
    expect(report?.error).toMatch(/left running, its GPUs may still be in use/);
    expect(isRunning(stuck.pid as number)).toBe(true);
    await until(() => !isRunning(other.pid as number), 'the other engine to be gone');
  });

  it('kills unidentified engines together: one grace period for all of them, not one each', async () => {
    const strays = ['a', 'b', 'c', 'd', 'e'].map((id) => strayEngine(id));
    await until(() => strays.every((s) => readProcStat(s.pid as number)?.comm === 'sleep'), 'the engines to run');
    const signalled: { pgid: number; sig: string }[] = [];
    const sup = harness.newSupervisor(
      { stopGraceMs: 1000 },
      {
        signalOrphanGroup: (pgid, sig) => {
          signalled.push({ pgid, sig });
          process.kill(-pgid, sig);
        },
      },
    );
    const recovery = new RecoverEngines({ nodeId: 'n', supervisor: sup, adoptReadyTimeoutMs: 1000, settle: async () => {}, report: () => {}, logger: silentLogger });
    const results = await recovery.recover();
    expect(results.map((r) => r.outcome)).toEqual(['killed', 'killed', 'killed', 'killed', 'killed']);
    // Every SIGTERM went out before any SIGKILL: the groups were waited on together.
    const firstKill = signalled.findIndex((s) => s.sig === 'SIGKILL');
    expect(signalled.slice(0, firstKill).map((s) => s.sig)).toEqual(['SIGTERM', 'SIGTERM', 'SIGTERM', 'SIGTERM', 'SIGTERM']);
  });
});
