import { readFileSync } from 'node:fs';

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
