import { readFileSync } from 'node:fs';
import { type ProcStat, readProcStat } from './proc-stat.js';

/**
 * What makes a pid "the same process" across an agent restart: its start time
 * (clock ticks since boot, field 22 of /proc/<pid>/stat) and the boot it
 * belongs to. A pid alone is not enough: pids are reused, and signalling a
 * reused pid kills whatever unrelated process now has it.
 */
export interface ProcessIdentity {
  startTime: string;
  bootId: string;
}

let cachedBootId: string | undefined;

/** This boot's id; a state file from before a reboot describes no running process. */
export function readBootId(): string {
  cachedBootId ??= readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  return cachedBootId;
}

/** A zombie has exited: it holds no GPU memory and cannot be stopped any further. */
export function isRunningStat(stat: ProcStat | undefined): stat is ProcStat {
  return stat !== undefined && stat.state !== 'Z' && stat.state !== 'X';
}

export type IdentityCheck =
  | { alive: true }
  | { alive: false; reason: string };

/**
 * Whether `pid` is still the process `identity` describes, and if not, why.
 * With `pgid`, it must also still lead that process group: the group is what
 * gets signalled, and a pid that left it (or never led it) names someone
 * else's group.
 */
export function checkIdentity(pid: number, identity: ProcessIdentity, pgid?: number): IdentityCheck {
  if (identity.bootId !== readBootId()) {
    return { alive: false, reason: `recorded before a reboot (boot id ${identity.bootId})` };
  }
  const stat = readProcStat(pid);
  if (!isRunningStat(stat)) return { alive: false, reason: `process ${pid} is gone` };
  if (stat.startTime !== identity.startTime) {
    return {
      alive: false,
      reason: `pid ${pid} now belongs to another process (start time ${stat.startTime}, recorded ${identity.startTime})`,
    };
  }
  if (pgid !== undefined && stat.pgrp !== pgid) {
    return { alive: false, reason: `process ${pid} is in process group ${stat.pgrp}, not the recorded ${pgid}` };
  }
  return { alive: true };
}
