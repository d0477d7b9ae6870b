import { existsSync, statSync } from 'node:fs';
import { timestampMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import type { LogsRequest } from '../../gen/llmgw/v1/admin_pb.js';
import type { LogLineShape } from '../../lib/files/log-line-shaper.js';
import { chooseRun, findReplicaRuns, type ReplicaRun } from '../../lib/files/replica-runs.js';
import { SHARD_ID_PATTERN, type ShardId } from '../../lib/shard-id.js';
import { shardLogPath } from '../../lib/shard-layout.js';
import type { AdminBackend } from './admin-backend.js';

/** A kept log file to read, not the current log of a supervised shard: one no longer supervised, or a run found by replica. */
export interface KeptLog {
  shardId: string;
  path: string;
}

/** A request's replica id, checked as shard ids are (it is matched, never a path, but it is echoed in messages). */
export function requireReplicaId(id: string): string {
  if (!SHARD_ID_PATTERN.test(id)) {
    throw new ConnectError(`invalid replica id ${JSON.stringify(id.slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  }
  return id;
}

/** --since and --timestamps of a Logs request. */
export function requestedShape(req: LogsRequest): LogLineShape {
  return { sinceMs: req.since ? timestampMs(req.since) : undefined, timestamps: req.timestamps };
}

/** A file's modification time, the bound --since judges untimed lines by; undefined when it cannot be read. */
export function mtimeMs(path: string): number | undefined {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

/** The log of a shard the agent no longer supervises whose file is kept (a crashed generation); undefined when none is. */
export function keptShardLog(backend: AdminBackend, id: ShardId): KeptLog | undefined {
  if (!backend.logDir) return undefined;
  const path = shardLogPath(backend.logDir, id);
  return existsSync(path) ? { shardId: id, path } : undefined;
}

/**
 * The run `--previous` or `--replica` names (chooseRun), from the failure
 * records and state files on disk and the shards supervised here; NotFound
 * saying why when no such run's log is kept.
 */
export function chosenRunLog(backend: AdminBackend, choice: { shardId?: ShardId; replicaId?: string; previous: boolean }): KeptLog {
  if (!backend.logDir) throw new ConnectError('this agent keeps no logs to choose a run from', Code.NotFound);
  const known: ReplicaRun[] = backend.shards().map((s) => ({ shardId: s.shardId, replicaId: s.replicaId, startedAtMs: s.startedAtMs, logPath: s.logPath }));
  const runs = findReplicaRuns({ logDir: backend.logDir, stateDir: backend.stateDir, known });
  const chosen = chooseRun(runs, backend.logDir, choice);
  if ('why' in chosen) throw new ConnectError(chosen.why, Code.NotFound);
  return { shardId: chosen.run.shardId, path: chosen.run.logPath };
}
