import { lstat, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { isNotFound } from '../errno.js';

/**
 * The shard id a log file of any generation stands for: `<id>.log`, the old
 * generation `<id>.log.1`, and a failed run's crash evidence `<id>.log.prev`
 * (and `.log.prev.<n>`); undefined for another file.
 */
export function shardIdOfAnyLog(name: string): string | undefined {
  const m = /^(.+)\.log(?:\.1|\.prev(?:\.\d+)?)?$/.exec(name);
  return m?.[1];
}

export interface PruneShardLogsOptions {
  /** The shard log directory (<log_dir>/shards). */
  dir: string;
  /** Logs not written for longer than this go; 0 keeps them whatever their age. */
  maxAgeMs: number;
  /** The logs that may go are cut, oldest first, to at most this many bytes in total. */
  maxTotalBytes: number;
  /** True for a shard whose logs must stay: supervised, being launched, recorded in a state file, or written. */
  keep: (shardId: string) => boolean;
  nowMs?: number;
}

/**
 * Removes the logs of shards no longer here, by age and then by total size.
 * Every generation has a new shard id, so without this a crash-looping
 * replica or a control plane churning ids fills /var/log (finding 17 of the
 * security review). A kept shard's files are never touched, and nothing but
 * a regular file is removed (lstat: a link is never followed). Returns the
 * names removed.
 */
export async function pruneShardLogs(opts: PruneShardLogsOptions): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(opts.dir);
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
  const now = opts.nowMs ?? Date.now();
  const candidates: { name: string; size: number; mtimeMs: number }[] = [];
  for (const name of names) {
    const id = shardIdOfAnyLog(name);
    if (id === undefined || opts.keep(id)) continue;
    const st = await lstat(join(opts.dir, name)).catch(() => undefined);
    if (st?.isFile()) candidates.push({ name, size: st.size, mtimeMs: st.mtimeMs });
  }
  const removed: string[] = [];
  const remove = async (name: string) => {
    try {
      await unlink(join(opts.dir, name));
      removed.push(name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  };
  const young: typeof candidates = [];
  for (const c of candidates) {
    if (opts.maxAgeMs > 0 && now - c.mtimeMs > opts.maxAgeMs) await remove(c.name);
    else young.push(c);
  }
  young.sort((a, b) => a.mtimeMs - b.mtimeMs);
  let total = young.reduce((sum, c) => sum + c.size, 0);
  for (const c of young) {
    if (total <= opts.maxTotalBytes) break;
    await remove(c.name);
    total -= c.size;
  }
  return removed;
}
