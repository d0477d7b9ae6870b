import { constants } from 'node:os';
import { errorMessage } from '../../../lib/errors.js';
import type { ShardStateFile } from '../../../lib/files/state-file.js';
import type { Logger } from '../../../lib/logger.js';
import type { Orphan } from '../../../lib/process/orphan.js';
import { unitExitOf } from '../../../lib/systemd/unit-exit.js';
import { readUnitStatus } from '../../../lib/systemd/read-unit-status.js';
import { isSameRun, whyNotSameRun } from '../launch/engine-unit.js';

/**
 * judgeOrphan's verdict on a unit engine, completed from systemd (which
 * judgeOrphan, synchronous and systemd-free, cannot ask):
 *
 * - alive and identified by pid and start time: its unit must be the run
 *   the state file recorded (same InvocationID, same main pid), or it is not
 *   adopted: the agent never takes over a unit it did not start;
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
    if (!isSameRun(status, unit)) return { ...o, identified: false, reason: whyNotSameRun(status, unit) };
    if (Number(status.MainPID) !== file.pid) {
      return { ...o, identified: false, reason: `unit ${unit.name}'s main pid is ${status.MainPID}, recorded ${file.pid}` };
    }
    return o;
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
