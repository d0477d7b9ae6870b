import { setTimeout as sleep } from 'node:timers/promises';
import { readProcStat } from '../lib/process/proc-stat.js';
import { isNoSuchProcess } from '../lib/errno.js';
import { type ShardDirs, findRecordedShardIds, judgeOrphan } from '../lib/process/judge-orphan.js';
import { isRunningStat } from '../lib/process/process-identity.js';
import { listProcessGroup } from '../lib/process/process-table.js';

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
export function killRecordedEngines(dirs: ShardDirs): KilledEngine[] {
  const killed: KilledEngine[] = [];
  // Never our own group: a state file naming it would take dev up down with the engines.
  const ownGroup = readProcStat(process.pid)?.pgrp;
  const killedGroups = new Set<number>();
  for (const shardId of findRecordedShardIds(dirs)) {
    const o = judgeOrphan(dirs, shardId);
    if (o.identified && o.pgid !== ownGroup && kill(-o.pgid)) {
      killedGroups.add(o.pgid);
      killed.push({ shardId, pgid: o.pgid, evidence: 'state-file' });
    }
    // Engines whose state file is gone or unreadable, and members of a group
    // whose leader already died, still write to their shard's log.
    for (const p of o.holders) {
      // A SIGKILLed group's members are listed until the kernel has reaped them.
      if (p.pid === process.pid || killedGroups.has(p.pgid)) continue;
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
    if (isNoSuchProcess(err)) return false;
    throw err;
  }
}
