import { type Stats, constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { errorMessage, failure } from '../lib/errors.js';
import { mincoreResidency, mincoreUnsupported } from './mincore-residency.js';
import { type BlobListing, listBlobs } from './scan-store.js';
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
 * Parts of the files read at once, each by a stream of its own: its own
 * descriptor, so the kernel keeps a read-ahead window for each, one read
 * at a time. Three streams took 0.8x the time of two reads in flight
 * through one descriptor from the same cold files here, and beat `cat`
 * (issue 52, item 2); a fourth would hold all four of libuv's threads, on
 * which the agent's own file work (state files, logs) waits.
 */
export const WARM_STREAMS = 3;
/** A stream reads this much of a file before it takes the next part: a large file is read as several parts at once. */
export const WARM_PART_BYTES = 32 * 1024 * 1024;

/** The model's blob files in the store (its weights and the rest), partial downloads left out; links are not followed. */
export async function modelBlobFiles(layout: StoreLayout, repo: string): Promise<{ path: string; bytes: number }[]> {
  // A folder that cannot be listed holds no blob a warm or a residency could read.
  return blobFilesOf(await listBlobs(layout.repoDir(repo)).catch((): BlobListing => ({ dir: '', entries: [] })));
}

/** modelBlobFiles of a listing already made, in the order of their names. */
export function blobFilesOf(listing: BlobListing): { path: string; bytes: number }[] {
  return listing.entries
    .filter((e) => !e.name.endsWith('.incomplete') && e.stats?.isFile() === true)
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((e) => ({ path: e.path, bytes: (e.stats as Stats).size }));
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
 * The files are cut into parts of at most WARM_PART_BYTES, taken in order
 * by WARM_STREAMS streams, each reading its part from start to end into a
 * buffer whose bytes nobody looks at (issue 52, item 2: `models warm` at
 * the disk's speed, beside `cat` of the same cold files). A part is
 * claimed from the budget before it is read, so the reads never take more
 * than it together; a file is read up to the size listed, and one shorter
 * than listed gives back to the budget what it did not hold, for the
 * parts after it.
 */
export async function warmFiles(
  files: readonly { path: string; bytes: number }[],
  budgetBytes: number,
  opts: { signal?: AbortSignal; onBytes?: (read: number) => void } = {},
): Promise<number> {
  const short = new Set<number>();
  let current = 0;
  let at = 0;
  let claimed = 0;
  let read = 0;
  let failed = false;
  let firstError: unknown;
  /** The next part: its file and range, claimed from the budget; undefined when the budget or the files are done. */
  const claim = () => {
    while (current < files.length && claimed < budgetBytes) {
      const f = files[current] as { path: string; bytes: number };
      if (short.has(current) || at >= f.bytes) {
        current++;
        at = 0;
        continue;
      }
      const bytes = Math.min(WARM_PART_BYTES, budgetBytes - claimed, f.bytes - at);
      const part = { file: current, path: f.path, from: at, to: at + bytes };
      at += bytes;
      claimed += bytes;
      return part;
    }
    return undefined;
  };
  const stream = async () => {
    const buf = Buffer.allocUnsafe(WARM_READ_BYTES);
    while (!failed) {
      opts.signal?.throwIfAborted();
      const part = claim();
      if (part === undefined) return;
      // O_NOFOLLOW: a blob the store lists is a file, never a link someone put in its place; O_NONBLOCK: a FIFO there never hangs the open.
      const fh = await open(part.path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      try {
        let pos = part.from;
        while (pos < part.to && !failed) {
          opts.signal?.throwIfAborted();
          const want = Math.min(WARM_READ_BYTES, part.to - pos);
          const { bytesRead } = await fh.read(buf, 0, want, pos);
          pos += bytesRead;
          read += bytesRead;
          if (bytesRead > 0) opts.onBytes?.(read);
          if (bytesRead < want) {
            short.add(part.file);
            break;
          }
        }
        // Past the end (the file shorter than listed): what was claimed and not read goes back to the budget.
        claimed -= part.to - pos;
      } finally {
        await fh.close();
      }
    }
  };
  // The first error stops every stream; each closes its own file before the whole answers.
  await Promise.all(
    Array.from({ length: WARM_STREAMS }, () =>
      stream().catch((err: unknown) => {
        if (!failed) firstError = err;
        failed = true;
      }),
    ),
  );
  if (failed) throw firstError;
  return read;
}
