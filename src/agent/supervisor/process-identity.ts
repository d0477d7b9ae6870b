import { readFileSync } from 'node:fs';

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

export interface ProcStat {
  pid: number;
  comm: string;
  /** One letter: R, S, D, Z (zombie), T, X (dead), … */
  state: string;
  ppid: number;
  pgrp: number;
  /** Kept as a string: clock ticks since boot can exceed 2^53 in principle, and only equality matters. */
  startTime: string;
}

/**
 * Parses /proc/<pid>/stat. comm (field 2) is the executable name in
 * parentheses and may itself contain spaces and parentheses ("a) (b"), so the
 * fields after it are found from the LAST ')', never by splitting the line.
 */
export function parseProcStat(text: string): ProcStat | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const pid = Number(text.slice(0, open).trim());
  const rest = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  // rest[0] is field 3 (state); field n is rest[n - 3].
  const startTime = rest[22 - 3];
  if (!Number.isInteger(pid) || startTime === undefined || !/^\d+$/.test(startTime)) return undefined;
  return {
    pid,
    comm: text.slice(open + 1, close),
    state: rest[0] as string,
    ppid: Number(rest[4 - 3]),
    pgrp: Number(rest[5 - 3]),
    startTime,
  };
}

/**
 * Reads /proc/<pid>/stat synchronously: right after spawn, an asynchronous
 * read would let the event loop reap a child that exited at once, and its
 * identity would be lost.
 */
export function readProcStat(pid: number, procRoot = '/proc'): ProcStat | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    return parseProcStat(readFileSync(`${procRoot}/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
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

/** The identity of a running process, or undefined when there is none with this pid. */
export function readProcessIdentity(pid: number): ProcessIdentity | undefined {
  const stat = readProcStat(pid);
  if (!isRunningStat(stat)) return undefined;
  return { startTime: stat.startTime, bootId: readBootId() };
}

export type IdentityCheck =
  | { alive: true }
  | { alive: false; reason: string };

/** Whether `pid` is still the process `identity` describes, and if not, why. */
export function checkIdentity(pid: number, identity: ProcessIdentity): IdentityCheck {
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
  return { alive: true };
}
