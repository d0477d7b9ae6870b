import { lstat } from 'node:fs/promises';
import { openRegularFile } from './open-regular-file.js';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as sleep } from 'node:timers/promises';
import { rotatedLogPath } from './rotate-log.js';
import { completeLinesEnd, tailFile } from './tail-file.js';

/** How often a followed file is looked at. Polling, because fs.watch loses track across truncation. */
export const FOLLOW_POLL_MS = 250;
const READ_MAX_BYTES = 1024 * 1024;

export interface FollowFileOptions {
  signal: AbortSignal;
  /** Checked every poll; when true the rest of the file is read and the follow ends. */
  isDone: () => boolean;
  pollMs?: number;
  /**
   * Lines already in the file to start with: the first batch is always the
   * last `backlogLines` complete lines (possibly none), and what follows
   * starts right after them. One snapshot for both, so no line is shown twice
   * or missed between them; a line still being written comes whole, later.
   */
  backlogLines?: number;
}

async function inode(path: string): Promise<number | undefined> {
  try {
    return (await lstat(path)).ino;
  } catch {
    return undefined;
  }
}

async function readRange(path: string, from: number, to: number): Promise<Buffer> {
  // Never through a symlink or into a FIFO: the agent reads logs as root.
  const fh = await openRegularFile(path);
  try {
    const len = Math.max(0, Math.min(to - from, READ_MAX_BYTES));
    const buf = Buffer.alloc(len);
    const { bytesRead } = await fh.read(buf, 0, len, from);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/**
 * Lines appended to `path` from now on (after a backlog, if asked), in
 * batches, across rotation: when the file is copied to `<path>.1` and
 * truncated, what was written since the last read is taken from the copy,
 * then reading restarts at the top of the file.
 */
export async function* followFile(path: string, opts: FollowFileOptions): AsyncGenerator<string[]> {
  const pollMs = opts.pollMs ?? FOLLOW_POLL_MS;
  const rotated = rotatedLogPath(path);
  const decoder = new StringDecoder('utf8');
  let partial = '';
  let pos = 0;
  let ino: number | undefined;
  try {
    const st = await lstat(path);
    pos = st.size;
    ino = st.ino;
  } catch {
    // Not there yet; everything written once it appears is new.
  }
  let rotatedIno = await inode(rotated);
  if (opts.backlogLines !== undefined && opts.backlogLines > 0) {
    let backlog: string[] = [];
    if (ino !== undefined) {
      const end = await completeLinesEnd(path, pos);
      backlog = await tailFile(path, opts.backlogLines, end);
      pos = end;
    }
    yield backlog;
  }

  const take = (buf: Buffer): string[] => {
    const text = partial + decoder.write(buf);
    const parts = text.split('\n');
    partial = parts.pop() as string;
    return parts;
  };

  for (;;) {
    const done = opts.isDone();
    const batch: string[] = [];
    // lstat: a symlink swapped in is a different file, and reading it is refused.
    const st = await lstat(path).catch(() => undefined);
    if (st) {
      const nowRotatedIno = await inode(rotated);
      if (st.ino !== ino) {
        // A different file now: read it from its start.
        ino = st.ino;
        pos = 0;
      } else if (nowRotatedIno !== rotatedIno || st.size < pos) {
        // Rotated (or truncated by someone): the bytes we had not read yet are
        // at the end of the copy, if there is a new copy.
        if (nowRotatedIno !== rotatedIno && nowRotatedIno !== undefined) {
          const rst = await lstat(rotated).catch(() => undefined);
          while (rst && pos < rst.size) {
            const buf = await readRange(rotated, pos, rst.size).catch(() => Buffer.alloc(0));
            if (buf.length === 0) break;
            pos += buf.length;
            batch.push(...take(buf));
          }
        }
        pos = 0;
      }
      rotatedIno = nowRotatedIno;
      while (pos < st.size) {
        const buf = await readRange(path, pos, st.size);
        if (buf.length === 0) break;
        pos += buf.length;
        batch.push(...take(buf));
      }
    }
    if (done) {
      const rest = partial + decoder.end();
      if (rest !== '') batch.push(rest);
      if (batch.length > 0) yield batch;
      return;
    }
    if (batch.length > 0) yield batch;
    if (opts.signal.aborted) return;
    try {
      await sleep(pollMs, undefined, { signal: opts.signal });
    } catch {
      return;
    }
  }
}
