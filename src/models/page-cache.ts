import { constants } from 'node:fs';
import { type FileHandle, lstat, open, readdir } from 'node:fs/promises';
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
 * The reads run on from one file into the next, which is opened as its
 * first read is claimed and closed once its last has come back: waiting at
 * each file's end for its last read and its close, and then for the next
 * one's open, was three round trips a file, most of the time of a model's
 * small files. Each read is claimed from the budget before it is asked, so
 * the reads in flight never take more than it together; a file is read up
 * to the size listed, and one shorter than listed gives back to the budget
 * what it did not hold.
 */
export async function warmFiles(
  files: readonly { path: string; bytes: number }[],
  budgetBytes: number,
  opts: { signal?: AbortSignal; onBytes?: (read: number) => void } = {},
): Promise<number> {
  const buf = Buffer.allocUnsafe(WARM_READ_BYTES);
  const state = files.map(() => ({ fh: undefined as Promise<FileHandle> | undefined, inFlight: 0, short: false, closed: false }));
  const closing: Promise<void>[] = [];
  let current = 0;
  let at = 0;
  let claimed = 0;
  let read = 0;
  let failed = false;
  let firstError: unknown;
  let closeError: unknown;
  const close = (i: number) => {
    const s = state[i];
    if (s?.fh === undefined || s.closed || s.inFlight > 0) return;
    s.closed = true;
    // Handled at once: a failed open was told by the read that waited for it, a failed close is told at the end.
    closing.push(
      s.fh.then(
        (fh) =>
          fh.close().catch((err: unknown) => {
            closeError ??= err;
          }),
        () => undefined,
      ),
    );
  };
  /** The next read: its file, offset and length, claimed from the budget; undefined when the budget or the files are done. */
  const claim = () => {
    while (current < files.length && claimed < budgetBytes) {
      const f = files[current] as { path: string; bytes: number };
      const s = state[current] as (typeof state)[number];
      if (s.short || at >= f.bytes) {
        current++;
        at = 0;
        close(current - 1);
        continue;
      }
      const want = Math.min(WARM_READ_BYTES, budgetBytes - claimed, f.bytes - at);
      // O_NOFOLLOW: a blob the store lists is a file, never a link someone put in its place; O_NONBLOCK: a FIFO there never hangs the open.
      s.fh ??= open(f.path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      s.inFlight++;
      claimed += want;
      const c = { i: current, from: at, want };
      at += want;
      return c;
    }
    return undefined;
  };
  const lane = async () => {
    for (;;) {
      if (failed) return;
      opts.signal?.throwIfAborted();
      const c = claim();
      if (c === undefined) return;
      const s = state[c.i] as (typeof state)[number];
      try {
        const fh = await (s.fh as Promise<FileHandle>);
        const { bytesRead } = await fh.read(buf, 0, c.want, c.from);
        // Past the end (the file shorter than listed): what was claimed and not read goes back to the budget.
        claimed -= c.want - bytesRead;
        if (bytesRead < c.want) s.short = true;
        read += bytesRead;
        if (bytesRead > 0) opts.onBytes?.(read);
      } finally {
        s.inFlight--;
        if (c.i < current || failed) close(c.i);
      }
    }
  };
  // The first error stops every lane; the handles are closed once none reads any more.
  const lanes = Array.from({ length: WARM_READS_IN_FLIGHT }, () =>
    lane().catch((err: unknown) => {
      if (!failed) firstError = err;
      failed = true;
    }),
  );
  await Promise.all(lanes);
  for (let i = 0; i < state.length; i++) close(i);
  await Promise.all(closing);
  if (failed) throw firstError;
  if (closeError !== undefined) throw closeError;
  return read;
}
