import { closeSync, constants, fchmodSync, fchownSync, fstatSync, mkdirSync, openSync } from 'node:fs';
import { errorMessage, failure } from '../errors.js';

/**
 * Engine logs: read by root and the admin group, nobody else. Engine output
 * holds prompts (vLLM logs requests unless told not to), tokens and stack
 * traces; world-readable, it made `admin.group` pointless and let any local
 * user hold a log open (findings 4 and 8 of the security review).
 */
export const LOG_FILE_MODE = 0o640;
/** The directory of engine logs: listable by root and the admin group only. */
export const LOG_DIR_MODE = 0o750;

/** -1 to fchown: leave that id as it is. */
const UNCHANGED = -1;

/**
 * Creates `dir` (and missing parents, with the same mode) and then sets its
 * mode and group through a file descriptor opened with O_NOFOLLOW, so that a
 * symlink planted at the path is refused instead of having its target
 * chmod'ed. Fixes the mode of a directory an older agent created (0755).
 */
export function ensureDirectory(dir: string, mode: number, gid?: number): void {
  mkdirSync(dir, { recursive: true, mode });
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    throw failure(`cannot open directory ${dir}: ${errorMessage(err)}; it must be a real directory, not a symlink`, { cause: err });
  }
  try {
    fchmodSync(fd, mode);
    if (gid !== undefined) fchownSync(fd, UNCHANGED, gid);
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates a shard's log (or takes the existing one) as a regular file with
 * LOG_FILE_MODE and group `gid`, through its fd: the engine (or systemd,
 * for a transient unit) then appends to a file nobody else can read.
 * systemd would create it 0644 itself.
 */
export function prepareLogFile(path: string, gid?: number): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, LOG_FILE_MODE);
  } catch (err) {
    throw failure(`cannot open the shard log ${path}: ${errorMessage(err)}`, { cause: err });
  }
  try {
    if (!fstatSync(fd).isFile()) throw failure(`the shard log ${path} is not a regular file; remove it`);
    fchmodSync(fd, LOG_FILE_MODE);
    if (gid !== undefined) fchownSync(fd, UNCHANGED, gid);
  } finally {
    closeSync(fd);
  }
}
