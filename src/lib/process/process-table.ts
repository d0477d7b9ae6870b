import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { isNoSuchProcess } from '../errno.js';
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

/**
 * Whether any process, a zombie included, is in group `pgid`: signal 0 to
 * the group, which the kernel answers from its own table, without a scan of
 * /proc. Only ESRCH means none; EPERM (members we may not signal) means some.
 */
function groupHasProcesses(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return !isNoSuchProcess(err);
  }
}

/** Running (non-zombie) members of process group `pgid`. */
export function listProcessGroup(pgid: number): number[] {
  if (!Number.isInteger(pgid) || pgid <= 1) return [];
  // The common answer when a dead engine's group is reaped, or a stop waits
  // for its group to go: none at all. The scan it saves reads every process's
  // stat, 3–7 ms on a loaded node, before FAILED or STOPPED can be reported.
  if (!groupHasProcesses(pgid)) return [];
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
 * Whose processes may count as a shard's log writers: the uids engines run
 * as. The agent's own (root) until engines get a user of their own; then the
 * engine users, which the caller passes.
 */
export type EngineUids = ReadonlySet<number>;

/** The uid engines run as when none is configured: the agent's own, since engines inherit it. */
export const agentUids = (): EngineUids => new Set([process.geteuid?.() ?? 0]);

/**
 * The uids a shard log's writer may run as: the agent's own (engines with no
 * `user`) and every configured engine user's. Without the latter, an engine
 * run as `nobody` would not count as its log's writer, and a live engine
 * would be taken for no engine at all.
 */
export function engineUidsFor(users: Iterable<{ uid: number } | undefined>): EngineUids {
  const uids = new Set(agentUids());
  for (const u of users) if (u) uids.add(u.uid);
  return uids;
}

/** O_ACCMODE of a file descriptor's open flags (fdinfo "flags:", octal). */
const O_ACCMODE = 0o3;
const O_RDONLY = 0o0;

/** The effective uid of `pid` (/proc/<pid>/status "Uid:", second field); undefined when gone. */
export function effectiveUid(pid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Uid:'));
    const euid = Number(line?.split(/\s+/)[2]);
    return Number.isInteger(euid) ? euid : undefined;
  } catch {
    return undefined;
  }
}

/** Whether fd `fd` of `pid` was opened for writing (O_WRONLY or O_RDWR), by /proc/<pid>/fdinfo. */
function openForWriting(pid: number, fd: number): boolean {
  try {
    const line = readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('flags:'));
    if (!line) return false;
    const flags = Number.parseInt(line.slice('flags:'.length).trim(), 8);
    return Number.isInteger(flags) && (flags & O_ACCMODE) !== O_RDONLY;
  } catch {
    return false;
  }
}

/**
 * The files `pid`'s stdout and stderr write to, when `pid` is a possible
 * engine process: running as an engine uid, each fd open for writing. Any
 * local user can point fd 1 of a process of their own at a log they can
 * open, read-only; counted as writers, such processes blocked those shards
 * from starting and, killed one at a time at start-up with the full
 * stop_grace each, kept the agent from registering (finding 4 of the
 * security review).
 */
function writtenLogs(pid: number, uids: EngineUids, wanted: (target: string) => boolean): string[] {
  const candidates: { fd: number; target: string }[] = [];
  for (const fd of [1, 2]) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (wanted(target)) candidates.push({ fd, target });
    } catch {
      // Gone, or not ours to inspect: either way not evidence.
    }
  }
  if (candidates.length === 0) return [];
  const uid = effectiveUid(pid);
  if (uid === undefined || !uids.has(uid)) return [];
  return [...new Set(candidates.filter((c) => openForWriting(pid, c.fd)).map((c) => c.target))];
}

/**
 * Running processes writing the file `logPath` on their stdout or stderr,
 * as an engine uid (see writtenLogs). An engine's output goes straight to
 * its shard's log, and its children inherit that, so this finds a shard's
 * processes by something no state file has to vouch for. Copy-then-truncate
 * rotation keeps the inode, so it holds after rotation.
 */
export function findProcessesLoggingTo(logPath: string, uids: EngineUids = agentUids()): LoggingProcess[] {
  const found: LoggingProcess[] = [];
  for (const pid of allPids()) {
    if (pid === process.pid) continue;
    if (writtenLogs(pid, uids, (t) => t === logPath).length === 0) continue;
    const stat = readProcStat(pid);
    if (isRunningStat(stat)) found.push({ pid, pgid: stat.pgrp });
  }
  return found;
}

/**
 * Running processes writing a file directly in `dir` on their stdout or
 * stderr, as an engine uid, by that file's path: one scan of /proc for
 * every shard log at once.
 */
export function findProcessesLoggingUnder(dir: string, uids: EngineUids = agentUids()): Map<string, LoggingProcess[]> {
  const found = new Map<string, LoggingProcess[]>();
  const prefix = `${dir}/`;
  for (const pid of allPids()) {
    if (pid === process.pid) continue;
    const files = writtenLogs(pid, uids, (t) => t.startsWith(prefix) && !t.slice(prefix.length).includes('/'));
    if (files.length === 0) continue;
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
