import { copyFile, open, rename, stat, truncate } from 'node:fs/promises';
import { isNotFound } from '../errno.js';

/** How often each running shard's log size is checked. */
export const LOG_CHECK_INTERVAL_MS = 2000;

export const rotatedLogPath = (logPath: string) => `${logPath}.1`;

/**
 * Caps a log the engine is writing, keeping one older generation in
 * `<log>.1`. Copy, then truncate in place: the engine holds the file open
 * with O_APPEND, so after the truncation its next write lands at the new end
 * (offset 0) and it never notices. Renaming the file instead would leave the
 * engine writing into `.1` forever, and the cap would do nothing.
 *
 * Lines written between the last copy and the truncation are lost; the copy
 * is topped up once right before truncating to keep that window to
 * microseconds.
 *
 * Returns true when it rotated.
 */
export async function rotateLogIfNeeded(logPath: string, maxBytes: number): Promise<boolean> {
  let size: number;
  try {
    size = (await stat(logPath)).size;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
  if (size <= maxBytes) return false;

  const rotated = rotatedLogPath(logPath);
  const tmp = `${rotated}.tmp`;
  await copyFile(logPath, tmp);
  const src = await open(logPath, 'r');
  const dst = await open(tmp, 'a');
  try {
    let pos = (await dst.stat()).size;
    const buf = Buffer.alloc(64 * 1024);
    for (;;) {
      const { bytesRead } = await src.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) break;
      await dst.write(buf, 0, bytesRead);
      pos += bytesRead;
    }
    await truncate(logPath, 0);
  } finally {
    await src.close();
    await dst.close();
  }
  // Readers of `.1` (a follower catching up) see the old copy or the new one, never half.
  await rename(tmp, rotated);
  return true;
}
