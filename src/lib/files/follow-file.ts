import { lstat } from 'node:fs/promises';
import { openRegularFile } from './open-regular-file.js';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as sleep } from 'node:timers/promises';
import { rotatedLogPath } from './rotate-log.js';
import { splitLines } from './split-lines.js';
import { completeLinesEnd, TAIL_CHUNK_BYTES, tailLines } from './tail-file.js';

/** How often a followed file is looked at. Polling, because fs.watch loses track across truncation. */
export const FOLLOW_POLL_MS = 250;
/**
 * Most bytes read, and so about what one batch holds: a writer that got far
 * ahead (or the rest of a rotated copy) comes in several batches, each
 * handed out before the next is read, not as one batch of all of it.
 */
const READ_MAX_BYTES = TAIL_CHUNK_BYTES;

export interface FollowFileOptions {
  signal: AbortSignal;
  /** Checked every poll; when true the rest of the file is read and the follow ends. */
  isDone: () => boolean;
  pollMs?: number;
  /**
   * Lines already in the file to start with: the last `backlogLines`
   * complete lines come first, in batches, and an empty batch says they have
   * all come (it comes also when there are none); what follows starts right
   * after them. One snapshot for both, so no line is shown twice or missed
   * between them; a line still being written comes whole, later.
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
    if (ino !== undefined) {
      const end = await completeLinesEnd(path, pos);
      try {
        yield* tailLines(path, opts.backlogLines, { endAt: end, signal: opts.signal });
      } catch (err) {
        // The follower has gone: as at any other point, the follow just ends.
        if (opts.signal.aborted) return;
        throw err;
      }
      pos = end;
    }
    yield [];
  }

  const take = (buf: Buffer): string[] => {
    const parts = splitLines(partial + decoder.write(buf));
    partial = parts.pop() as string;
    return parts;
  };

  for (;;) {
    const done = opts.isDone();
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
          while (rst && pos < rst.size && !opts.signal.aborted) {
            const buf = await readRange(rotated, pos, rst.size).catch(() => Buffer.alloc(0));
            if (buf.length === 0) break;
            pos += buf.length;
            const lines = take(buf);
            if (lines.length > 0) yield lines;
          }
        }
        pos = 0;
      }
      rotatedIno = nowRotatedIno;
      while (pos < st.size && !opts.signal.aborted) {
        const buf = await readRange(path, pos, st.size);
        if (buf.length === 0) break;
        pos += buf.length;
        const lines = take(buf);
        if (lines.length > 0) yield lines;
      }
    }
    if (done) {
      const rest = partial + decoder.end();
      if (rest !== '') yield [rest];
      return;
    }
    if (opts.signal.aborted) return;
    try {
      await sleep(pollMs, undefined, { signal: opts.signal });
    } catch {
      return;
    }
  }
}
