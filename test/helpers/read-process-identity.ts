import { readProcStat } from '../../src/lib/process/proc-stat.js';
import { isRunningStat, type ProcessIdentity, readBootId } from '../../src/lib/process/process-identity.js';

/**
 * The identity of a running process, or undefined when there is none with
 * this pid: what the supervisor records of an engine it launched
 * (launch-engine.ts identityOf), for tests that check one against a pid.
 */
export function readProcessIdentity(pid: number): ProcessIdentity | undefined {
  const stat = readProcStat(pid);
  if (!isRunningStat(stat)) return undefined;
  return { startTime: stat.startTime, bootId: readBootId() };
}
