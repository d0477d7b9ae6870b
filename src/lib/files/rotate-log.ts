import { constants } from 'node:fs';
import { type FileHandle, open, rename, stat, unlink } from 'node:fs/promises';
import { errnoCode, isNotFound } from '../errno.js';
import { LOG_FILE_MODE } from './log-file-modes.js';
import { openRegularFile } from './open-regular-file.js';

/** How often each running shard's log size is checked. */
export const LOG_CHECK_INTERVAL_MS = 2000;

export const rotatedLogPath = (logPath: string) => `${logPath}.1`;

/**
 * The temp file of a rotation: created, never opened through a link. A stale
 * one (a crash mid-rotation) is unlinked (unlink removes a link itself, not
 * its target) and created again, once.
 */
async function createTemp(tmp: string): Promise<FileHandle> {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  try {
    return await open(tmp, flags, 0o600);
  } catch (err) {
    if (errnoCode(err) !== 'EEXIST') throw err;
    await unlink(tmp);
    return open(tmp, flags, 0o600);
  }
}

/**
 * Whether `logPath` may be over `maxBytes` (or is not a plain file), by one
 * stat of the path: false for a regular file under the cap, the common case,
 * or no file. It runs every LOG_CHECK_INTERVAL_MS for every shard: opening,
 * fstat-ing and closing a FileHandle was three thread-pool round trips
 * (bench figure 5b). Only the decision comes from the path; anything else
 * (over the cap, a symlink to a large file, a FIFO) goes through
 * rotateLogIfNeeded's fd, which refuses them. Throws what stat throws but
 * ENOENT.
 */
export async function logMayNeedRotation(logPath: string, maxBytes: number): Promise<boolean> {
  const seen = await stat(logPath).catch((err: unknown) => {
    if (isNotFound(err)) return undefined;
    throw err;
  });
  return !(seen === undefined || (seen.isFile() && seen.size <= maxBytes));
}

/**
 * Caps a log the engine is writing, keeping one older generation in
 * `<log>.1`. Copy, then truncate in place: the engine holds the file open
 * with O_APPEND, so after the truncation its next write lands at the new end
 * (offset 0) and it never notices. Renaming the file instead would leave the
 * engine writing into `.1` forever, and the cap would do nothing.
 *
 * Everything goes through file descriptors: the log is opened once
 * (openRegularFile: no symlink, no FIFO), copied and ftruncate'd through
 * that fd, and the copy is created O_EXCL|O_NOFOLLOW with the log's owner
 * and LOG_FILE_MODE. By path, root truncated and copied whatever a symlink
 * at the log path named (finding 9 of the security review).
 *
 * Lines written between the end of the copy and the truncation are lost;
 * the copy reads until EOF right before truncating to keep that window to
 * microseconds.
 *
 * Returns true when it rotated.
 */
export async function rotateLogIfNeeded(logPath: string, maxBytes: number): Promise<boolean> {
  if (!(await logMayNeedRotation(logPath, maxBytes))) return false;
  let src: FileHandle;
  try {
    src = await openRegularFile(logPath, constants.O_RDWR);
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
  const rotated = rotatedLogPath(logPath);
  const tmp = `${rotated}.tmp`;
  try {
    const st = await src.stat();
    if (st.size <= maxBytes) return false;
    const dst = await createTemp(tmp);
    try {
      await dst.chown(st.uid, st.gid);
      // The old generation is as private as the log it came from, never more readable.
      await dst.chmod(st.mode & LOG_FILE_MODE);
      const buf = Buffer.alloc(64 * 1024);
      let pos = 0;
      for (;;) {
        const { bytesRead } = await src.read(buf, 0, buf.length, pos);
        if (bytesRead === 0) break;
        await dst.write(buf, 0, bytesRead);
        pos += bytesRead;
      }
      await src.truncate(0);
    } finally {
      await dst.close();
    }
  } finally {
    await src.close();
  }
  // Readers of `.1` (a follower catching up) see the old copy or the new one, never half.
  await rename(tmp, rotated);
  return true;
}
