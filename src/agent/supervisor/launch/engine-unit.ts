import { failure } from '../../../lib/errors.js';
import { type UnitStatus, readUnitStatus } from '../../../lib/systemd/read-unit-status.js';

/** The transient unit an engine runs in, as recorded in its state file. */
export interface EngineUnit {
  /** e.g. llmgw-shard-s1.service */
  name: string;
  /**
   * systemd's id of this one run of the unit (InvocationID). A unit of the
   * same name started by anyone else, or by a later start, has another one:
   * the agent never signals, stops or adopts a unit whose id differs.
   */
  invocationId: string;
}

/** How often a unit is looked at while it stops, or while its exit status is awaited. */
export const UNIT_POLL_MS = 20;
/** States in which nothing of the unit runs any more. */
export const UNIT_ENDED_STATES = new Set(['inactive', 'failed', '']);

/** Whether `status` is the run `unit` names; not-found and another invocation are not. */
export function isSameRun(status: UnitStatus, unit: EngineUnit): boolean {
  return status.LoadState === 'loaded' && status.InvocationID === unit.invocationId;
}

/** Why `status` is not the run `unit` names, in words for a log or a report. */
export function whyNotSameRun(status: UnitStatus, unit: EngineUnit): string {
  if (status.LoadState !== 'loaded') return `systemd no longer knows unit ${unit.name} (LoadState ${status.LoadState || 'empty'})`;
  return `unit ${unit.name} is another run (invocation ${status.InvocationID || 'none'}, recorded ${unit.invocationId})`;
}

/**
 * The unit's InvocationID once systemd-run has started it; systemd-run
 * returns when the unit's job is done, so the id is already set.
 */
export async function readInvocation(name: string, signal?: AbortSignal): Promise<{ unit: EngineUnit; mainPid: number }> {
  const status = await readUnitStatus(name, signal);
  if (status.LoadState !== 'loaded' || !/^[0-9a-f]{32}$/.test(status.InvocationID)) {
    throw failure(`systemd unit ${name} has no invocation id (LoadState ${status.LoadState}); see journalctl -u ${name}`);
  }
  return { unit: { name, invocationId: status.InvocationID }, mainPid: Number(status.MainPID) };
}
