import { rm } from 'node:fs/promises';
import { formatDuration } from '../../../lib/duration.js';
import { failure } from '../../../lib/errors.js';
import { readStateFile, removeStateFile } from '../../../lib/files/state-file.js';
import type { Orphan } from '../../../lib/process/orphan.js';
import { readProcStat } from '../../../lib/process/proc-stat.js';
import { checkIdentity } from '../../../lib/process/process-identity.js';
import { findProcessesLoggingTo } from '../../../lib/process/process-table.js';
import { terminateProcessGroup } from '../../../lib/process/terminate-process-group.js';
import { shardLogPath, shardStatePath } from '../../../lib/shard-layout.js';
import { readUnitStatus } from '../../../lib/systemd/read-unit-status.js';
import { isSameRun } from '../launch/engine-unit.js';
import { shardEnvFilePath } from '../launch/launch-shard.js';
import type { OrphanContext } from './find-orphans.js';
import { stopEngineUnit } from '../launch/stop-engine-unit.js';

export interface KillOrphanOptions {
  graceMs?: number;
  signal?: AbortSignal;
  /** Bounds the wait after SIGKILL; a group still running then is left and reported. */
  killWaitMs?: number;
  /** Ends what is left (its unit, its groups) but keeps the state file: a FAILED shard kept for ctl status --all across restarts (Supervisor.keepEnded). */
  keepStateFile?: boolean;
}

/**
 * Ends an engine a previous agent left (the caller has checked it is not
 * supervised). Dead: the state file is removed and nothing is signalled.
 * Alive: every process group still writing the shard's log (and the
 * recorded group, if its identity still matches) is terminated, then the
 * file is removed. A pid that merely appears in the file is never a reason
 * to signal it.
 *
 * The groups are terminated together, not one after the other, and with
 * `killWaitMs` the wait after SIGKILL is bounded: a group still running
 * then (uninterruptible sleep) is left, its state file kept, and this
 * throws saying so.
 */
export async function killOrphan(ctx: OrphanContext, o: Orphan, opts: KillOrphanOptions = {}): Promise<void> {
  const statePath = shardStatePath(ctx.config.stateDir, o.shardId);
  const logPath = shardLogPath(ctx.config.logDir, o.shardId);
  const graceMs = opts.graceMs ?? ctx.config.stopGraceMs;
  const ownGroup = readProcStat(process.pid)?.pgrp;
  const groups = new Set<number>();
  const read = await readStateFile(statePath, o.shardId);
  const unit = read.ok ? read.file.unit : undefined;
  let unitStuck = false;
  if (unit) {
    // Its cgroup first: that ends workers outside its process group too. Only the recorded run, never another unit of the name.
    const status = await readUnitStatus(unit.name).catch(() => undefined);
    if (status && isSameRun(status, unit)) {
      ctx.log.warn({ shard: o.shardId, unit: unit.name, reason: o.reason }, 'stopping the unit of an engine left by a previous agent');
      unitStuck = (await stopEngineUnit(unit, { graceMs, signal: opts.signal, killWaitMs: opts.killWaitMs })) === 'unkillable';
    }
  }
  if (read.ok && checkIdentity(read.file.pid, read.file.identity, read.file.pgid).alive) groups.add(read.file.pgid);
  for (const p of findProcessesLoggingTo(logPath, ctx.engineUids)) groups.add(p.pgid);
  // Never our own group: that would be the agent killing itself.
  const targets = [...groups].filter((pgid) => pgid > 1 && pgid !== ownGroup);
  const outcomes = await Promise.all(
    targets.map((pgid) => {
      ctx.log.warn({ shard: o.shardId, pgid, reason: o.reason }, 'killing an engine nothing can describe');
      return terminateProcessGroup({
        pgid,
        // Still ours while a member of the group writes this shard's log, or the identified leader lives.
        stillOurs: () =>
          findProcessesLoggingTo(logPath, ctx.engineUids).some((p) => p.pgid === pgid) ||
          (read.ok && read.file.pgid === pgid && checkIdentity(read.file.pid, read.file.identity, pgid).alive),
        graceMs,
        signal: opts.signal,
        killWaitMs: opts.killWaitMs,
        sendSignal: ctx.signalOrphanGroup,
      });
    }),
  );
  const stuck = targets.filter((_, i) => outcomes[i] === 'unkillable');
  if (unitStuck) {
    throw failure(
      `shard ${o.shardId}: unit ${unit?.name} still runs ${formatDuration(opts.killWaitMs ?? 0)} after SIGKILL (uninterruptible sleep, such as a hung GPU driver call); left running, its GPUs may still be in use: see systemctl status ${unit?.name}`,
    );
  }
  if (stuck.length > 0) {
    // The state file stays: the next recovery (or `ctl adopt`) looks again.
    throw failure(
      `shard ${o.shardId}: process group ${stuck.join(', ')} still runs ${formatDuration(opts.killWaitMs ?? 0)} after SIGKILL (uninterruptible sleep, such as a hung GPU driver call); left running, its GPUs may still be in use: see ps -o pid,stat,wchan -g ${stuck[0]}`,
    );
  }
  if (!opts.keepStateFile) await removeStateFile(statePath);
  // Its systemd-run environment (secrets) goes with it, as with Supervisor.remove().
  await rm(shardEnvFilePath(ctx.config.stateDir, o.shardId), { force: true });
}
