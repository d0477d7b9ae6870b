import { readFileSync } from 'node:fs';

export interface ProcStat {
  pid: number;
  /** Process group id. */
  pgrp: number;
  /** Session id. */
  session: number;
  /** Start time in clock ticks since boot; with the boot id it names one process for ever. */
  startTime: string;
}

/**
 * Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and
 * may itself contain spaces and parentheses, so fields are counted from the
 * LAST closing parenthesis, never by splitting the whole line.
 */
export function parseProcStat(text: string): ProcStat | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  const pid = Number.parseInt(text, 10);
  // After ") " come field 3 (state) onwards.
  const rest = text.slice(close + 2).trim().split(/\s+/);
  const pgrp = Number(rest[2]);
  const session = Number(rest[3]);
  const startTime = rest[19];
  if (!Number.isInteger(pid) || !Number.isInteger(pgrp) || startTime === undefined) return undefined;
  return { pid, pgrp, session, startTime };
}

/** /proc/<pid>/stat of a live process, undefined when it is gone. */
export function readProcStat(pid: number, procRoot = '/proc'): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`${procRoot}/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}
