import { constants } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { errorMessage, failure } from '../lib/errors.js';
import { FILE_CALLS_AT_ONCE, mapConcurrent } from '../lib/map-concurrent.js';
import { mincoreResidency, mincoreUnsupported } from './mincore-residency.js';
import type { StoreLayout } from './store-layout.js';

/*
 * How much of a model is in the page cache, and putting it there (issue 41).
 * A start whose weights are in memory reads them at memory speed: 88 s
 * instead of 695 s for SGLang on 8×B200 in the figures. Residency is
 * measured with mincore(2) on each file, never assumed: in this process
 * (mincore-residency.ts), or by fincore (util-linux, the same call) where
 * this process has no FFI.
 */

/** fincore takes this many files per call: one call per model in practice, bounded for one with thousands of shards. */
const FILES_PER_CALL = 256;
/**
 * A warm reads this much at a time. 4 MiB reads took 1.3-1.5x as long as
 * 1 MiB ones from the same cold files here (issue 52, item 2): each copy
 * went to a buffer larger than the core's cache, and a read waited for all
 * of its 4 MiB before the next was asked; the kernel's read-ahead, not the
 * size of a read, keeps the disk's queue full.
 */
export const WARM_READ_BYTES = 1024 * 1024;
/**
 * Reads of a warm asked at once. Two keep the disk busy while an answer
 * comes back; more took no less time here and would hold all four of
 * libuv's threads, on which the agent's own file work (state files, logs)
 * waits.
 */
export const WARM_READS_IN_FLIGHT = 2;

/** The model's blob files in the store (its weights and the rest), partial downloads left out; links are not followed. */
export async function modelBlobFiles(layout: StoreLayout, repo: string): Promise<{ path: string; bytes: number }[]> {
  const blobs = join(layout.repoDir(repo), 'blobs');
  let names: string[];
  try {
    names = (await readdir(blobs)).filter((name) => !name.endsWith('.incomplete')).sort();
  } catch {
    return [];
  }
  const paths = names.map((name) => join(blobs, name));
  const stats = await mapConcurrent(paths, FILE_CALLS_AT_ONCE, (path) => lstat(path).catch(() => undefined));
  return paths.flatMap((path, i) => {
    const s = stats[i];
    return s?.isFile() ? [{ path, bytes: s.size }] : [];
  });
}

/** node:child_process rather than execa: execa's own work per call was a third of the cost of each on a loaded machine. */
const execFileAsync = promisify(execFile);

/** Bytes of `files` in the page cache now, and their size; throws a one-line failure when they cannot be read. */
export function pageCacheResidency(files: readonly string[], signal?: AbortSignal): Promise<{ residentBytes: number; bytes: number }> {
  return mincoreUnsupported() === undefined ? mincoreResidency(files, signal) : fincoreResidency(files, signal);
}

/** pageCacheResidency through fincore, a process per FILES_PER_CALL files; throws a one-line failure when fincore cannot say. */
export async function fincoreResidency(files: readonly string[], signal?: AbortSignal): Promise<{ residentBytes: number; bytes: number }> {
  let residentBytes = 0;
  let bytes = 0;
  for (let i = 0; i < files.length; i += FILES_PER_CALL) {
    const batch = files.slice(i, i + FILES_PER_CALL);
    let stdout: string;
    try {
      ({ stdout } = await execFileAsync('fincore', ['--bytes', '--noheadings', '--raw', '--output', 'RES,SIZE', '--', ...batch], { timeout: 30_000, signal, env: { ...process.env, LC_ALL: 'C' } }));
    } catch (err) {
      const missing = (err as { code?: string }).code === 'ENOENT';
      throw failure(missing ? 'fincore (util-linux) is not installed: page-cache residency cannot be read' : `fincore failed: ${errorMessage(err).split('\n')[0]}`);
    }
    for (const line of stdout.split('\n')) {
      const [res, size] = line.trim().split(/\s+/).map(Number);
      if (res === undefined || size === undefined || !Number.isFinite(res) || !Number.isFinite(size)) continue;
      // Pages are whole: the last one of a file counts past its end.
      residentBytes += Math.min(res, size);
      bytes += size;
    }
  }
  return { residentBytes, bytes };
}

/**
 * Reads `files` in order into the page cache, at most `budgetBytes` of them
 * (a warm never takes more host RAM than it was given), and resolves with
 * the bytes read. `onBytes` hears the total as it grows; `signal` stops it.
 *
 * WARM_READS_IN_FLIGHT reads at a time at successive offsets, all into one
 * buffer whose bytes nobody looks at: one read at a time left the disk idle
 * while each answer came back and the next was asked (issue 52, item 2:
 * `models warm` at the disk's speed, beside `cat` of the same cold files).
 * Each read is claimed from the budget before it is asked, so the reads in
 * flight never take more than it together.
 */
export async function warmFiles(
  files: readonly { path: string; bytes: number }[],
  budgetBytes: number,
  opts: { signal?: AbortSignal; onBytes?: (read: number) => void } = {},
): Promise<number> {
  const buf = Buffer.allocUnsafe(WARM_READ_BYTES);
  let claimed = 0;
  let read = 0;
  for (const f of files) {
    if (claimed >= budgetBytes) break;
    // O_NOFOLLOW: a blob the store lists is a file, never a link someone put in its place.
    const fh = await open(f.path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      let at = 0;
      let eof = false;
      const lane = async () => {
        for (;;) {
          opts.signal?.throwIfAborted();
          const want = Math.min(WARM_READ_BYTES, budgetBytes - claimed);
          if (eof || want <= 0) return;
          const from = at;
          at += want;
          claimed += want;
          const { bytesRead } = await fh.read(buf, 0, want, from);
          // Past the end (the file shorter than listed): what was claimed and not read goes back to the budget.
          claimed -= want - bytesRead;
          if (bytesRead < want) eof = true;
          read += bytesRead;
          if (bytesRead > 0) opts.onBytes?.(read);
        }
      };
      await Promise.all(Array.from({ length: WARM_READS_IN_FLIGHT }, lane));
    } finally {
      await fh.close();
    }
  }
  return read;
}
