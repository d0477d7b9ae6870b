import { constants } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { errnoCode } from '../errno.js';
import { failure } from '../errors.js';

/**
 * Opens `path` only if it is a regular file, never through a symlink:
 * O_NOFOLLOW refuses a link planted at the path, O_NONBLOCK keeps a FIFO
 * planted there from blocking a thread-pool thread in open(), and fstat (on
 * the fd, not the path, so nothing can be swapped in between) refuses
 * anything that is not a file. With a log directory a local user could
 * write to, root rotation truncated and copied an arbitrary file through a
 * symlink, and `ctl logs` read it (finding 9 of the security review).
 *
 * A missing file is the caller's business: ENOENT comes through as it is.
 */
export async function openRegularFile(path: string, flags: number = constants.O_RDONLY): Promise<FileHandle> {
  let fh: FileHandle;
  try {
    fh = await open(path, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if (errnoCode(err) === 'ELOOP') throw failure(`${path} is a symlink; refused (a log is never read or rotated through a link)`, { cause: err });
    throw err;
  }
  try {
    if (!(await fh.stat()).isFile()) throw failure(`${path} is not a regular file; refused`);
  } catch (err) {
    await fh.close();
    throw err;
  }
  return fh;
}
