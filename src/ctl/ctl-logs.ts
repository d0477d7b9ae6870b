import { existsSync, statSync } from 'node:fs';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { followFile } from '../lib/files/follow-file.js';
import { tailFile } from '../lib/files/tail-file.js';
import { failure, usageError } from '../lib/errors.js';
import { parseDuration, DURATION_EXAMPLES } from '../lib/duration.js';
import { LogLineShaper } from '../lib/files/log-line-shaper.js';
import { chooseRun, findReplicaRuns } from '../lib/files/replica-runs.js';
import { MAX_LOG_LINES } from '../lib/max-log-lines.js';
import { previousRunLogPath, shardLogPath } from '../lib/shard-layout.js';
import { isValidShardId, parseShardId } from '../lib/shard-id.js';
import { isUnreachable } from './admin-call-error.js';
import { logAccessDenied } from './log-access-denied.js';
import { openAdminClient } from './open-admin-client.js';

export interface CtlLogsOptions {
  socket: string;
  /** Read directly from here when the agent is not running. */
  logDir: string;
  /** admin.group from the agent config, when ctl read it: named in the advice when the log directory refuses us. */
  adminGroup?: string;
  /** May be omitted with `replica`. */
  shardId?: string;
  /** A replica id: its newest run, or with `previous` the one before (each retry has a new shard id). */
  replica?: string;
  /** Only lines written at or after this time (see LogsRequest.since). */
  sinceMs?: number;
  /** Each line with the time it was written in front (best effort: LogsRequest.timestamps). */
  timestamps?: boolean;
  lines: number;
  follow: boolean;
  /** The previous run's log (kept when the shard id was started again); not with follow. */
  previous?: boolean;
  /** Ctrl-C: ends a follow, which is then a success. */
  signal: AbortSignal;
  /** Lines to stdout. */
  write: (lines: readonly string[]) => void;
  /** One-line notes to stderr. */
  note: (text: string) => void;
}

/**
 * A shard's last lines, and with `follow` its new ones until Ctrl-C, the
 * shard's removal, or the agent stopping. With the agent down the log file
 * is read directly (engines write it themselves, so it is there and current
 * whether or not the agent runs), and a note on stderr says so.
 */
export async function ctlLogs(o: CtlLogsOptions): Promise<void> {
  // Before any call: an id like "../x" would name a file outside the log directory.
  if (o.shardId !== undefined) parseShardId(o.shardId);
  else if (o.replica === undefined) throw usageError('name a shard, or a replica with --replica');
  if (o.replica !== undefined && !isValidShardId(o.replica)) throw usageError(`--replica ${JSON.stringify(o.replica.slice(0, 40))} is not a replica id: letters, digits, . _ -`);
  if (o.replica !== undefined && o.follow) throw usageError('--replica and --follow do not go together: follow the current shard by its id (ctl status lists it)');
  if (o.previous && o.follow) throw usageError('--previous and --follow do not go together: the previous run has ended');
  if (o.lines > MAX_LOG_LINES) {
    // The agent refuses more (it reads logs for every admin-group member); the file has them all.
    throw usageError(`--lines: at most ${MAX_LOG_LINES}, got ${o.lines}; for a longer history read the file itself: tail -n ${o.lines} ${o.shardId ? shardLogPath(o.logDir, o.shardId) : `${o.logDir}/shards/<shard>.log`}`);
  }
  let admin: Awaited<ReturnType<typeof openAdminClient>>;
  try {
    admin = await openAdminClient(o.socket);
  } catch (err) {
    if (!isUnreachable(err)) throw err;
    return readLogDirectly(o, err instanceof Error ? err.message : String(err));
  }
  try {
    // The agent reads lines: 0 as its default (proto3 cannot tell 0 from unset), so -n 0 asks for
    // one line and drops the tail, which is exactly the first message (it is sent even when empty).
    let skipTail = o.lines === 0;
    const lines = skipTail ? 1 : o.lines;
    const req = {
      shardId: o.shardId ?? '',
      replicaId: o.replica ?? '',
      lines,
      follow: o.follow,
      previous: o.previous ?? false,
      timestamps: o.timestamps ?? false,
      since: o.sinceMs === undefined ? undefined : timestampFromMs(o.sinceMs),
    };
    for await (const res of admin.client.logs(req, { signal: o.signal })) {
      if (skipTail) {
        skipTail = false;
        continue;
      }
      if (res.lines.length > 0) o.write(res.lines);
    }
    if (o.follow && !o.signal.aborted) o.note(`shard ${o.shardId ?? ''} is no longer supervised; stopped following`);
  } catch (err) {
    if (o.signal.aborted) return;
    throw admin.explain(err);
  } finally {
    admin.close();
  }
}

/** The file ctl reads itself with the agent down: the shard's log, or the run --previous / --replica names (chooseRun). */
function logPath(o: CtlLogsOptions, why: string): string {
  if (o.shardId !== undefined && !o.previous && o.replica === undefined) return shardLogPath(o.logDir, o.shardId);
  if (o.shardId !== undefined && o.previous && o.replica === undefined && existsSync(previousRunLogPath(o.logDir, o.shardId, 1))) {
    return previousRunLogPath(o.logDir, o.shardId, 1);
  }
  const chosen = chooseRun(findReplicaRuns({ logDir: o.logDir }), o.logDir, { shardId: o.shardId, replicaId: o.replica, previous: o.previous ?? false });
  if ('why' in chosen) {
    if (o.shardId !== undefined && o.replica === undefined) {
      throw failure(
        `no previous run of shard ${o.shardId} is kept at ${previousRunLogPath(o.logDir, o.shardId, 1)}, nor a run of its replica before it (pass --log-dir if logs are elsewhere), and ${why}`,
      );
    }
    throw failure(`${chosen.why} (read from ${o.logDir}; pass --log-dir if logs are elsewhere), and ${why}`);
  }
  return chosen.run.logPath;
}

async function readLogDirectly(o: CtlLogsOptions, why: string): Promise<void> {
  // Before "no log": a directory this user may not search hides a file that is there (exit 77, what to do).
  const deniedDir = logAccessDenied(shardLogPath(o.logDir, o.shardId ?? 'x'), o.logDir, o.adminGroup);
  if (deniedDir) throw deniedDir;
  const path = logPath(o, why);
  const denied = logAccessDenied(path, o.logDir, o.adminGroup);
  if (denied) throw denied;
  if (!existsSync(path)) {
    throw failure(
      o.previous
        ? `no previous run of shard ${o.shardId} is kept at ${path} (pass --log-dir if logs are elsewhere), and ${why}`
        : `no log for shard ${o.shardId} at ${path} (pass --log-dir if logs are elsewhere), and ${why}`,
    );
  }
  o.note(`the agent is not running; reading ${path} directly`);
  const shaper = new LogLineShaper({ sinceMs: o.sinceMs, timestamps: o.timestamps ?? false }, statSync(path).mtimeMs);
  if (o.lines > 0) o.write(shaper.apply(await tailFile(path, o.lines)));
  if (o.previous || o.replica !== undefined || !o.follow) return;
  for await (const batch of followFile(path, { signal: o.signal, isDone: () => false })) o.write(shaper.apply(batch, Date.now()));
}

/** `--since 10m` or `--since 2026-12-02T02:00:00Z`: the time from which lines are shown, in ms. */
export function parseSince(text: string, nowMs = Date.now()): number {
  const ago = parseDuration(text);
  if (ago !== undefined) return nowMs - ago;
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i.test(text)) {
    const t = Date.parse(text);
    if (!Number.isNaN(t)) return t;
  }
  throw usageError(`--since ${JSON.stringify(text)} is neither a duration nor an RFC 3339 time; ${DURATION_EXAMPLES}, or 2026-12-02T10:00:00Z`);
}
