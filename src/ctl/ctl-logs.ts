import { existsSync } from 'node:fs';
import { followFile } from '../lib/files/follow-file.js';
import { tailFile } from '../lib/files/tail-file.js';
import { failure, usageError } from '../lib/errors.js';
import { MAX_LOG_LINES } from '../lib/max-log-lines.js';
import { previousRunLogPath, shardLogPath } from '../lib/shard-layout.js';
import { parseShardId } from '../lib/shard-id.js';
import { isUnreachable } from './admin-call-error.js';
import { logAccessDenied } from './log-access-denied.js';
import { openAdminClient } from './open-admin-client.js';

export interface CtlLogsOptions {
  socket: string;
  /** Read directly from here when the agent is not running. */
  logDir: string;
  /** admin.group from the agent config, when ctl read it: named in the advice when the log directory refuses us. */
  adminGroup?: string;
  shardId: string;
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
  parseShardId(o.shardId);
  if (o.previous && o.follow) throw usageError('--previous and --follow do not go together: the previous run has ended');
  if (o.lines > MAX_LOG_LINES) {
    // The agent refuses more (it reads logs for every admin-group member); the file has them all.
    throw usageError(`--lines: at most ${MAX_LOG_LINES}, got ${o.lines}; for a longer history read the file itself: tail -n ${o.lines} ${logPath(o)}`);
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
    for await (const res of admin.client.logs({ shardId: o.shardId, lines, follow: o.follow, previous: o.previous ?? false }, { signal: o.signal })) {
      if (skipTail) {
        skipTail = false;
        continue;
      }
      if (res.lines.length > 0) o.write(res.lines);
    }
    if (o.follow && !o.signal.aborted) o.note(`shard ${o.shardId} is no longer supervised; stopped following`);
  } catch (err) {
    if (o.signal.aborted) return;
    throw admin.explain(err);
  } finally {
    admin.close();
  }
}

/** The file ctl would read itself: the shard's log, or its previous run's. */
function logPath(o: CtlLogsOptions): string {
  return o.previous ? previousRunLogPath(o.logDir, o.shardId, 1) : shardLogPath(o.logDir, o.shardId);
}

async function readLogDirectly(o: CtlLogsOptions, why: string): Promise<void> {
  const path = logPath(o);
  // Before "no log": a directory this user may not search hides a file that is there (exit 77, what to do).
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
  if (o.lines > 0) o.write(await tailFile(path, o.lines));
  if (o.previous || !o.follow) return;
  for await (const batch of followFile(path, { signal: o.signal, isDone: () => false })) o.write(batch);
}
