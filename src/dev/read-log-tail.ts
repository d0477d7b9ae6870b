import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { describeErrno } from '../lib/errno.js';

/** Bytes read from the end of a log for its last lines: an engine's lines are short, a whole log can be gigabytes. */
export const LOG_TAIL_BYTES = 16 * 1024;

/**
 * The last `n` lines of a log file, or a one-line reason it has none to
 * show. Never throws: it explains a failure and must not become one.
 */
export function readLogTail(path: string, n: number): { lines: string[] } | { problem: string } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    return { problem: describeErrno(err) };
  }
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, LOG_TAIL_BYTES);
    const buf = Buffer.alloc(length);
    readSync(fd, buf, 0, length, size - length);
    const lines = buf.toString('utf8').split('\n');
    // The first line may be cut by the window; the last is the newline's empty rest.
    if (size > length) lines.shift();
    while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    return lines.length === 0 ? { problem: 'empty so far' } : { lines: lines.slice(-n) };
  } catch (err) {
    return { problem: describeErrno(err) };
  } finally {
    closeSync(fd);
  }
}
