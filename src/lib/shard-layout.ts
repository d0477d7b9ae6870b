import { join } from 'node:path';

/**
 * Where a shard lives on disk, in one place: the agent writes these files,
 * and ctl and dev read them with the agent down. Callers validate the shard
 * id first (lib/shard-id.ts): the id names the files.
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
