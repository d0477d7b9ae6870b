import { join } from 'node:path';

/**
 * Where a shard lives on disk, in one place: the agent writes these files,
 * and ctl and dev read them with the agent down. Callers validate the shard
 * id first (lib/shard-id.ts): the id names the files.
 *
 * Files under `log_dir`, for anything that prunes them:
 * - `shards/<id>.log` (and `shards/<id>.log.1`, its size rotation): the
 *   current run's output; an engine may hold it open.
 * - `shards/<id>.failure.json`: the failure record of the current run,
 *   written when its engine fails (exit status, when, last lines).
 * - `previous-runs/<id>.<n>.log` and `previous-runs/<id>.<n>.failure.json`:
 *   runs before the current one, n = 1 the latest; moved there when the
 *   same shard id is started again, at most supervisor keepPreviousRuns of
 *   them. No engine writes there. Outside `shards/` so that the scan for
 *   engines still writing a shard log (judge-orphan) never reads a kept log
 *   as a shard's; `<id>.<n>` cannot be mistaken for another id's name since
 *   n is the last dot-separated part and always a number.
 */

/** `<state_dir>/shards`: state files, mode 0700. */
export const shardStateDir = (stateDir: string): string => join(stateDir, 'shards');

/** `<log_dir>/shards`: engine logs. */
export const shardLogDir = (logDir: string): string => join(logDir, 'shards');

/** `<state_dir>/shards/<id>.json`: what a restarted agent needs to find and identify the engine. */
export const shardStatePath = (stateDir: string, shardId: string): string => join(shardStateDir(stateDir), `${shardId}.json`);

/** `<log_dir>/shards/<id>.log`: the engine's stdout and stderr, appended. */
export const shardLogPath = (logDir: string, shardId: string): string => join(shardLogDir(logDir), `${shardId}.log`);

/** The shard id a log file name stands for, or undefined for another file. */
export function shardIdOfLogName(name: string): string | undefined {
  return name.endsWith('.log') ? name.slice(0, -'.log'.length) : undefined;
}

/** `<log_dir>/shards/<id>.failure.json`: how the current run's engine failed. */
export const shardFailurePath = (logDir: string, shardId: string): string => join(shardLogDir(logDir), `${shardId}.failure.json`);

/** `<log_dir>/previous-runs`: logs and failure records of earlier runs. */
export const previousRunsDir = (logDir: string): string => join(logDir, 'previous-runs');

/** `<log_dir>/previous-runs/<id>.<n>.log`: the log of the n-th run before the current one (1: the latest). */
export const previousRunLogPath = (logDir: string, shardId: string, n = 1): string => join(previousRunsDir(logDir), `${shardId}.${n}.log`);

/** `<log_dir>/previous-runs/<id>.<n>.failure.json`: that run's failure record, when it failed. */
export const previousRunFailurePath = (logDir: string, shardId: string, n = 1): string =>
  join(previousRunsDir(logDir), `${shardId}.${n}.failure.json`);
