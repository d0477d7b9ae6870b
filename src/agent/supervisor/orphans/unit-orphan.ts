import { constants } from 'node:os';
import { errorMessage } from '../../../lib/errors.js';
import type { ShardStateFile } from '../../../lib/files/state-file.js';
import type { Logger } from '../../../lib/logger.js';
import type { Orphan } from '../../../lib/process/orphan.js';
import { unitExitOf } from '../../../lib/systemd/unit-exit.js';
import { type UnitStatus, readUnitStatus } from '../../../lib/systemd/read-unit-status.js';
import { type EngineUnit, isSameRun, whyNotSameRun } from '../launch/engine-unit.js';

/**
 * judgeOrphan's verdict on a unit engine, completed from systemd (which
 * judgeOrphan, synchronous and systemd-free, cannot ask):
 *
 * - alive and identified by pid, start time and boot id: that is the
 *   engine, whatever systemd says of its unit. When the unit is not the run
 *   the state file recorded (same InvocationID, same main pid) it is not
 *   used: no stop goes through a unit the agent cannot prove is the
 *   engine's, and the engine is watched and stopped by pid (unitNote). A
 *   systemd that forgot the unit (a daemon-reload that lost the transient
 *   file) once made recovery SIGKILL every serving engine (walkthrough 2,
 *   row 3);
 * - dead (or only its leftovers alive): the exit status systemd recorded for
 *   the engine is added to the reason, and as exitCode, so that the control plane hears how an engine
 *   that died while the agent was down ended, not only that it is gone.
 *
 * systemctl not answering changes nothing: an engine identified by its pid
 * and start time is not made killable by a busy systemd.
 */
export async function judgeUnitOrphan(o: Orphan, file: ShardStateFile, log: Logger): Promise<Orphan> {
  const unit = file.unit;
  if (!unit) return o;
  let status: Awaited<ReturnType<typeof readUnitStatus>>;
  try {
    status = await readUnitStatus(unit.name);
  } catch (err) {
    log.warn({ shard: o.shardId, unit: unit.name, err: errorMessage(err) }, "cannot read a left engine's unit; judging it by its pid alone");
    return o;
  }
  if (o.alive && o.identified) {
    const unitNote = unitNoteOf(status, unit, file.pid);
    if (unitNote === undefined) return o;
    // Once per adoption: a supervised shard is not judged again.
    log.warn(
      { shard: o.shardId, pid: file.pid, unit: unit.name, why: unitNote },
      'an engine identified by its pid, start time and boot id has a unit systemd does not describe as recorded; the engine is kept, watched and stopped by pid',
    );
    return { ...o, unitNote };
  }
  // The engine is gone (or not the one recorded); what is alive, if anything, is what it left
  // writing its log, which recovery kills. Either way, how the engine ended is systemd's to say.
  if (!isSameRun(status, unit)) return { ...o, reason: `${o.reason}; ${whyNotSameRun(status, unit)}` };
  const exit = unitExitOf(status, file.pid);
  if (!exit) return { ...o, reason: `${o.reason}; systemd recorded no exit status for it (${unit.name} is ${status.ActiveState})` };
  const how = exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`;
  // 128+n, as a shell reports a death by signal n, and as the runner does for its own children.
  const exitCode = exit.signal ? 128 + (constants.signals[exit.signal] ?? 0) : (exit.code ?? 0);
  return { ...o, reason: `${o.reason}; systemd recorded: ${how} (${unit.name} Result=${status.Result})`, exitCode, ...(exit.signal ? { exitSignal: exit.signal } : {}) };
}

/**
 * Why the unit cannot fence an engine identified by pid, in the words of
 * ctl status's note; undefined when it is the run recorded, with the engine
 * as its main process.
 */
export function unitNoteOf(status: UnitStatus, unit: EngineUnit, pid: number): string | undefined {
  if (status.LoadState === 'not-found') return `unit ${unit.name} forgotten by systemd (LoadState not-found); watched by pid`;
  if (!isSameRun(status, unit)) return `${whyNotSameRun(status, unit)}; watched by pid`;
  if (Number(status.MainPID) !== pid) return `unit ${unit.name}'s main pid is ${status.MainPID || 'none'}, recorded ${pid}; watched by pid`;
  return undefined;
}
