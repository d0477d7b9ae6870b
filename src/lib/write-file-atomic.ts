import { constants } from 'node:fs';
import { open, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * Writes a file so that a crash at any moment leaves either the old file or
 * the new one, never half of one: temp file (O_EXCL, O_NOFOLLOW), fsync,
 * rename, fsync of the directory. rename() replaces a symlink at the target
 * rather than writing through it.
 */
export async function writeFileAtomic(target: string, data: string, mode = 0o600): Promise<void> {
  const tmp = `${target}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await fh.close();
  try {
    await rename(tmp, target);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
  const dir = await open(dirname(target), constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
