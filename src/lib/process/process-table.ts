import { readdirSync, readlinkSync } from 'node:fs';
import { readProcStat } from './proc-stat.js';
import { isRunningStat } from './process-identity.js';

/**
 * Questions answered by scanning /proc. Both are needed where a single pid
 * cannot answer: a group whose leader died may still have members holding
 * GPUs, and a shard whose state file is unreadable has no recorded pid at all.
 */

function allPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (/^\d+$/.test(name)) pids.push(Number(name));
  }
  return pids;
}

/** Running (non-zombie) members of process group `pgid`. */
export function listProcessGroup(pgid: number): number[] {
  if (!Number.isInteger(pgid) || pgid <= 1) return [];
  const members: number[] = [];
  for (const pid of allPids()) {
    const stat = readProcStat(pid);
    if (isRunningStat(stat) && stat.pgrp === pgid) members.push(pid);
  }
  return members;
}

export interface LoggingProcess {
  pid: number;
  pgid: number;
}

/**
 * Running processes whose stdout or stderr is the file `logPath`. An engine's
 * output goes straight to its shard's log, and its children inherit that, so
 * this finds a shard's processes by something no state file has to vouch
 * for. Copy-then-truncate rotation keeps the inode, so it holds after rotation.
 */
export function findProcessesLoggingTo(logPath: string): LoggingProcess[] {
  const found: LoggingProcess[] = [];
  for (const pid of allPids()) {
    if (pid === process.pid) continue;
    let writesLog = false;
    for (const fd of [1, 2]) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === logPath) writesLog = true;
      } catch {
        // Gone, or not ours to inspect: either way not evidence.
      }
    }
    if (!writesLog) continue;
    const stat = readProcStat(pid);
    if (isRunningStat(stat)) found.push({ pid, pgid: stat.pgrp });
  }
  return found;
}

/**
 * Running processes whose stdout or stderr is a file directly in `dir`, by
 * that file's path: one scan of /proc for every shard log at once.
 */
export function findProcessesLoggingUnder(dir: string): Map<string, LoggingProcess[]> {
  const found = new Map<string, LoggingProcess[]>();
  const prefix = `${dir}/`;
  for (const pid of allPids()) {
    if (pid === process.pid) continue;
    const files = new Set<string>();
    for (const fd of [1, 2]) {
      try {
        const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
        if (target.startsWith(prefix) && !target.slice(prefix.length).includes('/')) files.add(target);
      } catch {
        // Gone, or not ours to inspect: either way not evidence.
      }
    }
    if (files.size === 0) continue;
    const stat = readProcStat(pid);
    if (!isRunningStat(stat)) continue;
    for (const file of files) {
      const list = found.get(file) ?? [];
      list.push({ pid, pgid: stat.pgrp });
      found.set(file, list);
    }
  }
  return found;
}
