import type { FileHandle } from 'node:fs/promises';
import { StringDecoder } from 'node:string_decoder';
import { isNotFound } from '../errno.js';
import { openRegularFile } from './open-regular-file.js';
import { splitLines } from './split-lines.js';

/**
 * Bytes read at a time, and about what one batch of lines holds: a tail is
 * streamed chunk by chunk, never materialised. Whole, 2^31-1 lines of a
 * 17 MB log were 2.2 M strings per call, and 128 such calls took the agent
 * to 5.7 GB (security review 2, N3).
 */
export const TAIL_CHUNK_BYTES = 64 * 1024;
/**
 * Most bytes of the file one tail covers (read, not held). Without a limit a
 * log without newlines (a progress bar, a binary dump) would be read whole;
 * the first line returned is then cut short instead.
 */
export const TAIL_MAX_BYTES = 16 * 1024 * 1024;
export interface TailLinesOptions {
  /** Read as if the file ended here, when that comes before its end. */
  endAt?: number;
  /** Stops the read between chunks (it rejects with the signal's reason): the caller has gone. */
  signal?: AbortSignal;
}

/**
 * The last `lines` lines of a file, in batches of what one chunk holds (never
 * an empty batch). The newlines are found backwards from its end (or from
 * `endAt`) in chunks, so a 1 GiB log costs what a 1 KiB one does; the lines
 * are then read forwards from there, one chunk at a time. A missing file has
 * no lines; a line longer than MAX_LINE_CHARS comes in pieces.
 */
export async function* tailLines(path: string, lines: number, opts: TailLinesOptions = {}): AsyncGenerator<string[]> {
  if (lines <= 0) return;
  opts.signal?.throwIfAborted();
  let fh: FileHandle;
  try {
    // Never through a symlink or into a FIFO: the agent reads logs as root.
    fh = await openRegularFile(path);
  } catch (err) {
    if (isNotFound(err)) return;
    throw err;
  }
  try {
    const size = Math.min((await fh.stat()).size, opts.endAt ?? Number.POSITIVE_INFINITY);
    const buf = Buffer.allocUnsafe(TAIL_CHUNK_BYTES);
    const start = await startOfLastLines(fh, buf, size, lines, opts.signal);
    yield* linesBetween(fh, buf, start, size, opts.signal);
  } finally {
    await fh.close();
  }
}

/**
 * Where the last `lines` lines before `size` begin: just past the newline
 * before them, 0 when the file has no more lines than that, or
 * TAIL_MAX_BYTES before `size` when no such newline comes within it.
 */
async function startOfLastLines(fh: FileHandle, buf: Buffer, size: number, lines: number, signal: AbortSignal | undefined): Promise<number> {
  const floor = Math.max(0, size - TAIL_MAX_BYTES);
  let pos = size;
  let found = 0;
  while (pos > floor) {
    signal?.throwIfAborted();
    const len = Math.min(buf.length, pos - floor);
    pos -= len;
    const { bytesRead } = await fh.read(buf, 0, len, pos);
    let i = bytesRead - 1;
    // The newline that ends the last line does not start a new one.
    if (pos + i === size - 1 && buf[i] === 0x0a) i -= 1;
    // Native search for each newline; i < 0 must not reach lastIndexOf, which reads a negative offset from the end.
    while (i >= 0) {
      const nl = buf.lastIndexOf(0x0a, i);
      if (nl === -1) break;
      found += 1;
      // The newline before the first wanted line.
      if (found === lines) return pos + nl + 1;
      i = nl - 1;
    }
  }
  return floor;
}

/** The lines of [from, to), one batch per chunk read. */
async function* linesBetween(fh: FileHandle, buf: Buffer, from: number, to: number, signal: AbortSignal | undefined): AsyncGenerator<string[]> {
  const decoder = new StringDecoder('utf8');
  let partial = '';
  for (let pos = from; pos < to; ) {
    signal?.throwIfAborted();
    const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, to - pos), pos);
    // Truncated under us (rotation): what was there is all there is.
    if (bytesRead === 0) break;
    pos += bytesRead;
    const batch = splitLines(partial + decoder.write(buf.subarray(0, bytesRead)));
    partial = batch.pop() as string;
    if (batch.length > 0) yield batch;
  }
  const rest = partial + decoder.end();
  if (rest !== '') yield [rest];
}

/**
 * The last `lines` lines of a file, all at once: for the few lines of a
 * failure report and for ctl reading a log itself. What the agent sends a
 * client is streamed with tailLines instead.
 */
export async function tailFile(path: string, lines: number, endAt?: number): Promise<string[]> {
  const out: string[] = [];
  for await (const batch of tailLines(path, lines, { endAt })) {
    for (const line of batch) out.push(line);
  }
  return out;
}

/**
 * Where the last complete line before `before` ends: the offset just past its
 * newline, 0 when there is none. A line with no newline within TAIL_MAX_BYTES
 * is given up on: `before` comes back.
 */
export async function completeLinesEnd(path: string, before: number): Promise<number> {
  const fh = await openRegularFile(path);
  try {
    const buf = Buffer.allocUnsafe(TAIL_CHUNK_BYTES);
    let pos = before;
    while (pos > 0 && before - pos < TAIL_MAX_BYTES) {
      const len = Math.min(buf.length, pos);
      pos -= len;
      const { bytesRead } = await fh.read(buf, 0, len, pos);
      const nl = buf.subarray(0, bytesRead).lastIndexOf(0x0a);
      if (nl !== -1) return pos + nl + 1;
    }
    return pos === 0 ? 0 : before;
  } finally {
    await fh.close();
  }
}
