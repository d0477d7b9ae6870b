import { setTimeout as sleep } from 'node:timers/promises';
import { type UnitExit, unitExitOf } from '../../../lib/systemd/unit-exit.js';
import { readUnitStatus } from '../../../lib/systemd/read-unit-status.js';
import { type EngineUnit, UNIT_POLL_MS, isSameRun, whyNotSameRun } from './engine-unit.js';

/**
 * How long systemd may take to record a main process's exit after /proc says
 * it is gone (it reaps on SIGCHLD, within milliseconds when healthy).
 */
export const UNIT_EXIT_WAIT_MS = 5000;

/**
 * How the unit's main process `pid` ended, as systemd recorded it: waited for
 * briefly, since the engine may be seen gone in /proc a moment before
 * systemd has reaped it. A description instead when systemd cannot say (the
 * unit was unloaded, or is another run).
 */
export async function readUnitExit(unit: EngineUnit, pid: number, signal?: AbortSignal): Promise<{ exit: UnitExit; result: string } | { reason: string }> {
  const deadline = Date.now() + UNIT_EXIT_WAIT_MS;
  for (;;) {
    const status = await readUnitStatus(unit.name, signal);
    if (!isSameRun(status, unit)) return { reason: whyNotSameRun(status, unit) };
    const exit = unitExitOf(status, pid);
    if (exit) return { exit, result: status.Result };
    if (Date.now() >= deadline) return { reason: `systemd recorded no exit for pid ${pid} of ${unit.name} within ${UNIT_EXIT_WAIT_MS} ms` };
    await sleep(UNIT_POLL_MS, undefined, { signal });
  }
}
