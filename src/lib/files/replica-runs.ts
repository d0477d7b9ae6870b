import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { isValidShardId } from '../shard-id.js';
import { previousRunLogPath, previousRunsDir, shardLogDir, shardLogPath, shardStateDir } from '../shard-layout.js';
import type { FailureRecord } from './failure-record.js';

/** One run of a replica whose log is kept: the shard id it ran under and where its log is. */
export interface ReplicaRun {
  shardId: string;
  replicaId: string;
  startedAtMs: number;
  logPath: string;
}

const FAILURE_SUFFIX = '.failure.json';
/** A failure record in previous-runs/: `<id>.<n>.failure.json`. */
const PREVIOUS_FAILURE = /^(.+)\.(\d+)\.failure\.json$/;

/**
 * Every run of a node's replicas whose log is kept, newest start first,
 * from what carries a replica id on disk: the failure records beside the
 * logs (log_dir/shards, log_dir/previous-runs), the state files (when
 * `stateDir` is readable: the agent's, not ctl's as an operator), and
 * `known` (the shards the agent supervises). The reference control plane
 * starts each retry under a new shard id, so "the run before this one" of a
 * replica is found here, not by shard id. A run whose log is gone is left
 * out.
 */
export function findReplicaRuns(opts: { logDir: string; stateDir?: string; known?: readonly ReplicaRun[] }): ReplicaRun[] {
  const runs = new Map<string, ReplicaRun>();
  const add = (r: ReplicaRun) => {
    if (r.replicaId === '' || runs.has(r.logPath) || !existsSync(r.logPath)) return;
    runs.set(r.logPath, r);
  };
  for (const r of opts.known ?? []) add(r);
  const fromRecord = (path: string, logPath: (id: string) => string) => {
    const rec = readJson<FailureRecord>(path);
    if (!rec || typeof rec.replicaId !== 'string' || !isValidShardId(rec.shardId)) return;
    add({ shardId: rec.shardId, replicaId: rec.replicaId, startedAtMs: Date.parse(rec.startedAt) || 0, logPath: logPath(rec.shardId) });
  };
  for (const name of list(shardLogDir(opts.logDir))) {
    if (name.endsWith(FAILURE_SUFFIX)) fromRecord(join(shardLogDir(opts.logDir), name), (id) => shardLogPath(opts.logDir, id));
  }
  for (const name of list(previousRunsDir(opts.logDir))) {
    const m = PREVIOUS_FAILURE.exec(name);
    if (m) fromRecord(join(previousRunsDir(opts.logDir), name), (id) => previousRunLogPath(opts.logDir, id, Number(m[2])));
  }
  if (opts.stateDir) {
    const dir = shardStateDir(opts.stateDir);
    for (const name of list(dir)) {
      const st = name.endsWith('.json') ? readJson<{ shardId?: unknown; replicaId?: unknown; createdAtMs?: unknown }>(join(dir, name)) : undefined;
      if (!st || !isValidShardId(st.shardId) || typeof st.replicaId !== 'string') continue;
      add({ shardId: st.shardId, replicaId: st.replicaId, startedAtMs: Number(st.createdAtMs) || 0, logPath: shardLogPath(opts.logDir, st.shardId) });
    }
  }
  return [...runs.values()].sort((a, b) => b.startedAtMs - a.startedAtMs);
}

/**
 * `ctl logs --previous` of a replica: the run before its newest, or, given
 * `before` (a shard id of that replica), the newest run that started before
 * it. Undefined when there is none.
 */
export function previousReplicaRun(runs: readonly ReplicaRun[], replicaId: string, before?: ReplicaRun): ReplicaRun | undefined {
  const mine = runs.filter((r) => r.replicaId === replicaId);
  if (!before) return mine[1];
  return mine.find((r) => r.logPath !== before.logPath && r.startedAtMs < before.startedAtMs);
}

function list(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function readJson<T>(path: string): T | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as T;
  } catch {
    return undefined;
  }
}

/** Which log `ctl logs` reads: a shard id, a replica, either with previous. */
export interface RunChoice {
  shardId?: string;
  replicaId?: string;
  previous: boolean;
}

/**
 * The kept log a choice names, from `runs` (findReplicaRuns): with a
 * replica, its newest run, or with previous the one before; with a shard id
 * and previous, the run before it under the same id when one is kept
 * (previous-runs/<id>.1.log), else the run of its replica that started
 * before it. A shard id alone is not resolved here (its own log is read).
 */
export function chooseRun(runs: readonly ReplicaRun[], logDir: string, c: RunChoice): { run: ReplicaRun } | { why: string } {
  const own = c.shardId === undefined ? undefined : runs.find((r) => r.shardId === c.shardId && r.logPath === shardLogPath(logDir, c.shardId));
  if (c.shardId !== undefined && c.previous && c.replicaId === undefined) {
    const sameId = previousRunLogPath(logDir, c.shardId, 1);
    if (existsSync(sameId)) return { run: { shardId: c.shardId, replicaId: own?.replicaId ?? '', startedAtMs: 0, logPath: sameId } };
  }
  const replicaId = c.replicaId ?? own?.replicaId;
  if (replicaId === undefined) {
    return { why: `no previous run of shard ${c.shardId} is kept: neither a run under the same id nor a failure record or state file naming its replica` };
  }
  const mine = runs.filter((r) => r.replicaId === replicaId);
  if (mine.length === 0) return { why: `no run of replica ${replicaId} has a kept log on this node (failure records and state files name none)` };
  if (!c.previous) return { run: mine[0] as ReplicaRun };
  const before = c.shardId === undefined ? undefined : own;
  const prev = previousReplicaRun(runs, replicaId, before);
  if (!prev) {
    const of = before ? `before shard ${before.shardId}` : `before its newest (${mine[0]?.shardId})`;
    return { why: `no run of replica ${replicaId} ${of} has a kept log on this node` };
  }
  return { run: prev };
}
