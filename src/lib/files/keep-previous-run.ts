import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { isNotFound } from '../errno.js';
import { previousRunFailurePath, previousRunLogPath, previousRunsDir, shardFailurePath, shardLogPath } from '../shard-layout.js';

/** How many earlier runs of one shard id keep their log and failure record; the default of SupervisorConfig.keepPreviousRuns. */
export const DEFAULT_KEEP_PREVIOUS_RUNS = 3;

/**
 * Before a shard id is started again: moves the last run's log and failure
 * record to `previous-runs/<id>.1.*`, shifting older ones up and dropping
 * those past `keep` (see shard-layout.ts for the names). Without it the new
 * engine appended to the crashed one's log, and the crash loop's evidence
 * was one log of many runs, rotated away by size within the hour.
 *
 * Called only when no process of the shard runs: a leftover still writing
 * would write into the kept file. Returns whether a run was kept.
 */
export async function keepPreviousRun(logDir: string, shardId: string, keep: number): Promise<boolean> {
  if (keep <= 0) return false;
  const log = shardLogPath(logDir, shardId);
  const failure = shardFailurePath(logDir, shardId);
  const hasLog = await stat(log).then(
    (s) => s.size > 0,
    (err: unknown) => {
      if (isNotFound(err)) return false;
      throw err;
    },
  );
  if (!hasLog) {
    // A record without a log (the log was removed by hand) describes nothing the next run can be told apart from.
    await removeIfThere(failure);
    return false;
  }
  // 0750 as the shard log directory (LOG_DIR_MODE): kept logs hold engine output too.
  await mkdir(previousRunsDir(logDir), { recursive: true, mode: 0o750 });
  await removeIfThere(previousRunLogPath(logDir, shardId, keep));
  await removeIfThere(previousRunFailurePath(logDir, shardId, keep));
  for (let n = keep - 1; n >= 1; n--) {
    await moveIfThere(previousRunLogPath(logDir, shardId, n), previousRunLogPath(logDir, shardId, n + 1));
    await moveIfThere(previousRunFailurePath(logDir, shardId, n), previousRunFailurePath(logDir, shardId, n + 1));
  }
  await rename(log, previousRunLogPath(logDir, shardId, 1));
  await moveIfThere(failure, previousRunFailurePath(logDir, shardId, 1));
  return true;
}

async function moveIfThere(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

async function removeIfThere(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}
