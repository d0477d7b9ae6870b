import { constants } from 'node:os';
import type { UnitStatus } from './read-unit-status.js';

/** How a unit's main process ended, as systemd recorded it (ExecMainCode, ExecMainStatus). */
export type UnitExit = { code: number; signal: null } | { code: null; signal: NodeJS.Signals };

// siginfo's si_code values, which systemd reports as ExecMainCode.
const CLD_EXITED = 1;
const CLD_KILLED = 2;
const CLD_DUMPED = 3;

/** Number → name, the first name of a number winning: 6 is SIGABRT, not its alias SIGIOT. */
const SIGNAL_NAMES = new Map<number, NodeJS.Signals>();
for (const [name, n] of Object.entries(constants.signals)) if (!SIGNAL_NAMES.has(n)) SIGNAL_NAMES.set(n, name as NodeJS.Signals);

/**
 * The main process's end from the unit's status, or undefined while systemd
 * has recorded none for the process `pid` (ExecMainCode 0: it is running, or
 * systemd has not reaped it yet; another ExecMainPID: a different run).
 */
export function unitExitOf(status: UnitStatus, pid?: number): UnitExit | undefined {
  if (pid !== undefined && Number(status.ExecMainPID) !== pid) return undefined;
  const code = Number(status.ExecMainCode);
  const value = Number(status.ExecMainStatus);
  if (!Number.isInteger(value)) return undefined;
  if (code === CLD_EXITED) return { code: value, signal: null };
  if (code === CLD_KILLED || code === CLD_DUMPED) {
    const signal = SIGNAL_NAMES.get(value);
    return signal ? { code: null, signal } : { code: 128 + value, signal: null };
  }
  return undefined;
}
