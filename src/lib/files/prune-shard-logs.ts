import { lstat, readdir, unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { isNotFound } from '../errno.js';

/**
 * The shard id a file of `<log_dir>/shards` stands for (see shard-layout.ts):
 * its log `<id>.log`, the old generation `<id>.log.1` and the current run's
 * failure record `<id>.failure.json`; undefined for another file.
 */
export function shardIdOfAnyLog(name: string): string | undefined {
  const m = /^(.+)\.(?:log(?:\.1)?|failure\.json)$/.exec(name);
  return m?.[1];
}

/**
 * The shard id a file of `<log_dir>/previous-runs` stands for: a kept run's
 * log `<id>.<n>.log` or failure record `<id>.<n>.failure.json`, n always a
 * number and the last dot-separated part before the suffix, so `a.1.log`
 * there is shard a's, while in shards/ it is shard a.1's.
 */
export function shardIdOfPreviousRun(name: string): string | undefined {
  const m = /^(.+)\.\d+\.(?:log|failure\.json)$/.exec(name);
  return m?.[1];
}

export interface PruneShardLogsOptions {
  /** The shard log directory (<log_dir>/shards). */
  dir: string;
  /** The directory of kept runs (<log_dir>/previous-runs); its files are named `previous-runs/<name>` in the result. */
  previousRunsDir?: string;
  /** Logs not written for longer than this go; 0 keeps them whatever their age. */
  maxAgeMs: number;
  /** The logs that may go are cut, oldest first, to at most this many bytes in total. */
  maxTotalBytes: number;
  /** True for a shard whose logs must stay: supervised, being launched, recorded in a state file, or written. */
  keep: (shardId: string) => boolean;
  nowMs?: number;
}

/**
 * Removes the logs and failure records of shards no longer here, current
 * and kept runs (previous-runs), by age and then by total size.
 * Every generation has a new shard id, so without this a crash-looping
 * replica or a control plane churning ids fills /var/log (finding 17 of the
 * security review). A kept shard's files are never touched, and nothing but
 * a regular file is removed (lstat: a link is never followed). Returns the
 * names removed.
 */
export async function pruneShardLogs(opts: PruneShardLogsOptions): Promise<string[]> {
  const now = opts.nowMs ?? Date.now();
  const candidates: { name: string; path: string; size: number; mtimeMs: number }[] = [];
  const scan = async (dir: string, idOf: (name: string) => string | undefined, prefix: string) => {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    for (const name of names) {
      const id = idOf(name);
      if (id === undefined || opts.keep(id)) continue;
      const path = join(dir, name);
      const st = await lstat(path).catch(() => undefined);
      if (st?.isFile()) candidates.push({ name: `${prefix}${name}`, path, size: st.size, mtimeMs: st.mtimeMs });
    }
  };
  await scan(opts.dir, shardIdOfAnyLog, '');
  // Kept runs of a shard no longer here are its evidence too, and grew without bound the same way.
  if (opts.previousRunsDir !== undefined) await scan(opts.previousRunsDir, shardIdOfPreviousRun, `${basename(opts.previousRunsDir)}/`);
  const removed: string[] = [];
  const remove = async ({ name, path }: { name: string; path: string }) => {
    try {
      await unlink(path);
      removed.push(name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  };
  const young: typeof candidates = [];
  for (const c of candidates) {
    if (opts.maxAgeMs > 0 && now - c.mtimeMs > opts.maxAgeMs) await remove(c);
    else young.push(c);
  }
  young.sort((a, b) => a.mtimeMs - b.mtimeMs);
  let total = young.reduce((sum, c) => sum + c.size, 0);
  for (const c of young) {
    if (total <= opts.maxTotalBytes) break;
    await remove(c);
    total -= c.size;
  }
  return removed;
}
