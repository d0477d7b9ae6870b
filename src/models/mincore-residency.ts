import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { errorMessage, failure } from '../lib/errors.js';
import { libcBinding } from '../lib/libc.js';

/*
 * Page-cache residency read in this process: mincore(2) on a read-only
 * shared mapping of each file, the call fincore (util-linux 2.38) makes,
 * without a process spawned for it. A warm asked fincore twice, before and
 * after its reads, and each spawn from Node cost 10-20 ms on this host:
 * more than a third of what `cat` takes to read the bench's 128 MiB cold
 * (issue 52, item 2). The mapping is never touched, so nothing is read
 * into the cache by measuring it.
 *
 * The kernel answers for the page cache only for files the caller may
 * write or owns (mm/mincore.c, can_do_mincore, since 5.0); for others it
 * says which pages this process has mapped, none here. fincore's answer
 * is the same, being the same call by the same user: root's, the agent's,
 * is the page cache's.
 */

/** Pages whose residency one mincore call asks: a 1 GiB window of 4 KiB pages, a 256 KiB vector. */
const WINDOW_PAGES = 256 * 1024;
const PROT_READ = 1;
const MAP_SHARED = 1;
/** (void *)-1, what mmap answers on failure. */
const MAP_FAILED = 0xffff_ffff_ffff_ffffn;

interface Calls {
  pageBytes: number;
  /** Resident pages of the mapping of `bytes` of `fd` from `offset` (a multiple of pageBytes), counted in `vec`; or the errno. */
  residentPages(fd: number, offset: number, bytes: number, vec: Buffer): number | { errno: number; call: string };
}

const load = libcBinding<Calls>((libc) => {
  const mmap = libc.func('void *mmap(void *addr, size_t length, int prot, int flags, int fd, int64_t offset)');
  const munmap = libc.func('int munmap(void *addr, size_t length)');
  const mincore = libc.func('int mincore(void *addr, size_t length, _Out_ uint8_t *vec)');
  const getpagesize = libc.func('int getpagesize(void)');
  const pageBytes = Number(getpagesize());
  return {
    pageBytes,
    residentPages(fd, offset, bytes, vec) {
      const addr = mmap(null, bytes, PROT_READ, MAP_SHARED, fd, offset);
      if (libc.koffi.address(addr) === MAP_FAILED) return { errno: libc.errno(), call: 'mmap' };
      try {
        if (Number(mincore(addr, bytes, vec)) !== 0) return { errno: libc.errno(), call: 'mincore' };
      } finally {
        munmap(addr, bytes);
      }
      return residentCount(vec, Math.ceil(bytes / pageBytes));
    },
  };
});

/**
 * Pages marked resident in the first `pages` bytes of mincore's vector: the
 * low bit of each byte (the others are reserved), counted four bytes at a
 * time, as a byte at a time was a millisecond a 64 MiB file before V8 had
 * compiled the loop, and a warm measures once before and once after.
 */
export function residentCount(vec: Buffer, pages: number): number {
  // A warm's usual answers, none or all of a file, found by a compare in C: the loop below, before V8 had
  // compiled it, was 2 ms of the warm's residency reads on a loaded machine.
  if (pages <= WINDOW_PAGES) {
    const shown = vec.subarray(0, pages);
    if (shown.equals(uniform(0).subarray(0, pages))) return 0;
    if (shown.equals(uniform(1).subarray(0, pages))) return pages;
  }
  // Bytes up to the first 4-byte boundary (where a Uint32Array view must start), then words, then the tail.
  const head = (4 - (vec.byteOffset % 4)) % 4;
  if (pages < head + 4) return lowBits(vec, 0, pages);
  const words = Math.floor((pages - head) / 4);
  const view = new Uint32Array(vec.buffer, vec.byteOffset + head, words);
  let resident = lowBits(vec, 0, head) + lowBits(vec, head + words * 4, pages);
  for (let i = 0; i < words; i++) {
    // The four low bits, one per byte, summed into the top byte by the multiply.
    resident += Math.imul((view[i] as number) & 0x01010101, 0x01010101) >>> 24;
  }
  return resident;
}

const uniforms = new Map<number, Buffer>();

/** WINDOW_PAGES bytes of `byte`, made once. */
function uniform(byte: number): Buffer {
  let b = uniforms.get(byte);
  if (b === undefined) {
    b = Buffer.alloc(WINDOW_PAGES, byte);
    uniforms.set(byte, b);
  }
  return b;
}

function lowBits(vec: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) n += (vec[i] as number) & 1;
  return n;
}

/** Why residency cannot be read in this process (no FFI: musl, another OS), or undefined where it can. */
export function mincoreUnsupported(): string | undefined {
  const calls = load();
  return 'unsupported' in calls ? calls.unsupported : undefined;
}

/** At most this long between two yields to the event loop while residency is read. */
const YIELD_AFTER_MS = 2;

/**
 * Bytes of `files` in the page cache now, and their size, as fincore counts
 * them: a file's last page counts up to its end. Throws a one-line failure
 * when a file cannot be opened or mapped, as fincore exits non-zero then.
 *
 * Each file is opened, measured and closed with synchronous calls, one file
 * after the other: the open, fstat and close of a blob whose inode a warm
 * has just stat-ed take microseconds, and each through libuv's threads was
 * a round trip through the event loop, a third of the residency read of
 * the bench's model (issue 52, item 2). Yields to the event loop whenever
 * YIELD_AFTER_MS have passed since the last yield (so between 1 GiB
 * windows, each longer than that): an agent measuring a model of hundreds
 * of gigabytes or of thousands of files keeps answering meanwhile.
 */
export async function mincoreResidency(files: readonly string[], signal?: AbortSignal): Promise<{ residentBytes: number; bytes: number }> {
  const calls = load();
  if ('unsupported' in calls) throw failure(`page-cache residency cannot be read in this process: ${calls.unsupported}`);
  let residentBytes = 0;
  let bytes = 0;
  let since = performance.now();
  const breathe = async () => {
    if (performance.now() - since < YIELD_AFTER_MS) return;
    await nextTurn();
    since = performance.now();
  };
  for (const path of files) {
    signal?.throwIfAborted();
    const r = await fileResidency(calls, path, breathe, signal);
    residentBytes += r.residentBytes;
    bytes += r.bytes;
    await breathe();
  }
  return { residentBytes, bytes };
}

async function fileResidency(calls: Calls, path: string, breathe: () => Promise<void>, signal?: AbortSignal): Promise<{ residentBytes: number; bytes: number }> {
  let fd: number;
  try {
    // O_NOFOLLOW: a link put in a blob's place is not measured as the blob; O_NONBLOCK: nor does a FIFO hang the open.
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    throw failure(`cannot read the page-cache residency of ${path}: ${errorMessage(err)}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw failure(`cannot read the page-cache residency of ${path}: not a regular file`);
    const windowBytes = WINDOW_PAGES * calls.pageBytes;
    const vec = Buffer.allocUnsafe(Math.min(WINDOW_PAGES, Math.ceil(st.size / calls.pageBytes)));
    let pages = 0;
    for (let offset = 0; offset < st.size; offset += windowBytes) {
      if (offset > 0) await breathe();
      signal?.throwIfAborted();
      const r = calls.residentPages(fd, offset, Math.min(windowBytes, st.size - offset), vec);
      if (typeof r !== 'number') throw failure(`cannot read the page-cache residency of ${path}: ${r.call} failed with errno ${r.errno}`);
      pages += r;
    }
    return { residentBytes: Math.min(pages * calls.pageBytes, st.size), bytes: st.size };
  } finally {
    closeSync(fd);
  }
}
