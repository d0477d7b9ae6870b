import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { checkIdentity, isRunningStat, readProcStat } from '../agent/supervisor/process-identity.js';
import { findProcessesLoggingTo, listProcessGroup } from '../agent/supervisor/process-table.js';
import { readStateFileSync } from '../agent/supervisor/state-file.js';
import { errnoCode } from '../lib/errors.js';

export interface KilledEngine {
  shardId: string;
  /** The process group signalled, or the lone pid when the group could not be vouched for. */
  pgid?: number;
  pid?: number;
  /** What proved it ours: the state file's identity, or its stdout on our shard log. */
  evidence: 'state-file' | 'shard-log';
}

/**
 * The backstop of `llmgw dev up`'s stop: SIGKILLs every engine process the
 * agent recorded under `stateDir` and that is still running (the agent
 * normally stopped them all; this is for an agent that died or did not
 * answer). Synchronous, so that a second Ctrl-C can run it before exiting.
 *
 * Nothing is signalled on a pid alone: a group is killed when its leader
 * still has the start time recorded in the state file (a reused pid has
 * another), and any other process only when its stdout is one of our shard
 * logs, which live in a fresh mkdtemp directory nothing else writes to.
 */
export function killRecordedEngines(dirs: { stateDir: string; logDir: string }): KilledEngine[] {
  const killed: KilledEngine[] = [];
  const own = new Set([process.pid]);
  // Never our own group: a state file naming it would take dev up down with the engines.
  const ownGroup = readProcStat(process.pid)?.pgrp;
  const killedGroups = new Set<number>();
  const logs = new Map<string, string>(); // shard id → log path
  const shardsDir = join(dirs.stateDir, 'shards');
  for (const name of listDir(shardsDir)) {
    if (!name.endsWith('.json')) continue;
    const shardId = name.slice(0, -'.json'.length);
    logs.set(shardId, join(dirs.logDir, 'shards', `${shardId}.log`));
    const read = readStateFileSync(join(shardsDir, name), shardId);
    if (!read.ok) continue;
    const { pid, pgid, identity } = read.file;
    if (pgid !== ownGroup && checkIdentity(pid, identity).alive && kill(-pgid)) {
      killedGroups.add(pgid);
      killed.push({ shardId, pgid, evidence: 'state-file' });
    }
  }
  // Engines whose state file is gone or unreadable, and members of a group
  // whose leader already died, still write to their shard's log.
  for (const name of listDir(join(dirs.logDir, 'shards'))) {
    if (name.endsWith('.log')) logs.set(name.slice(0, -'.log'.length), join(dirs.logDir, 'shards', name));
  }
  for (const [shardId, logPath] of logs) {
    for (const p of findProcessesLoggingTo(logPath)) {
      // A SIGKILLed group's members are listed until the kernel has reaped them.
      if (own.has(p.pid) || killedGroups.has(p.pgid)) continue;
      if (kill(p.pid)) killed.push({ shardId, pid: p.pid, evidence: 'shard-log' });
    }
  }
  return killed;
}

/** Waits until the groups and pids killRecordedEngines signalled are gone; false when some survive `timeoutMs`. */
export async function waitEnginesGone(killed: readonly KilledEngine[], timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  const alive = () => killed.some((k) => (k.pgid !== undefined ? listProcessGroup(k.pgid).length > 0 : isRunningStat(readProcStat(k.pid ?? 0))));
  while (alive()) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

function kill(target: number): boolean {
  try {
    process.kill(target, 'SIGKILL');
    return true;
  } catch (err) {
    if (errnoCode(err) === 'ESRCH') return false;
    throw err;
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
