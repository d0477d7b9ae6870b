import type { FileHandle } from 'node:fs/promises';
import { isNotFound } from '../errno.js';
import { openRegularFile } from './open-regular-file.js';

const CHUNK_BYTES = 64 * 1024;
/**
 * Most bytes read for one tail. Without a limit a log without newlines (a
 * progress bar, a binary dump) would be read whole; the first line returned
 * is then cut short instead.
 */
export const TAIL_MAX_BYTES = 16 * 1024 * 1024;

/**
 * The last `lines` lines of a file, read backwards from its end (or from
 * `endAt`, if that comes first) in chunks, so a 1 GiB log costs what a 1 KiB
 * one does. A missing file has no lines.
 */
export async function tailFile(path: string, lines: number, endAt = Number.POSITIVE_INFINITY): Promise<string[]> {
  if (lines <= 0) return [];
  let fh: FileHandle;
  try {
    // Never through a symlink or into a FIFO: the agent reads logs as root.
    fh = await openRegularFile(path);
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
  try {
    const size = Math.min((await fh.stat()).size, endAt);
    const chunks: Buffer[] = [];
    let pos = size;
    let newlines = 0;
    let skipFinalNewline = true;
    // One more newline than lines wanted: it marks where the first wanted line starts.
    while (pos > 0 && newlines <= lines && size - pos < TAIL_MAX_BYTES) {
      const len = Math.min(CHUNK_BYTES, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      const { bytesRead } = await fh.read(buf, 0, len, pos);
      const chunk = buf.subarray(0, bytesRead);
      chunks.unshift(chunk);
      for (let i = chunk.length - 1; i >= 0; i--) {
        if (chunk[i] !== 0x0a) continue;
        // The newline that ends the last line does not start a new one.
        if (skipFinalNewline && pos + i === size - 1) continue;
        newlines++;
      }
      skipFinalNewline = false;
    }
    let text = Buffer.concat(chunks).toString('utf8');
    if (text.endsWith('\n')) text = text.slice(0, -1);
    if (text === '' && size === 0) return [];
    const all = text.split('\n');
    return all.slice(Math.max(0, all.length - lines));
  } finally {
    await fh.close();
  }
}

/**
 * Where the last complete line before `before` ends: the offset just past its
 * newline, 0 when there is none. A line with no newline within TAIL_MAX_BYTES
 * is given up on: `before` comes back.
 */
export async function completeLinesEnd(path: string, before: number): Promise<number> {
  const fh = await openRegularFile(path);
  try {
    let pos = before;
    while (pos > 0 && before - pos < TAIL_MAX_BYTES) {
      const len = Math.min(CHUNK_BYTES, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      const { bytesRead } = await fh.read(buf, 0, len, pos);
      const nl = buf.subarray(0, bytesRead).lastIndexOf(0x0a);
      if (nl !== -1) return pos + nl + 1;
    }
    return pos === 0 ? 0 : before;
  } finally {
    await fh.close();
  }
}
