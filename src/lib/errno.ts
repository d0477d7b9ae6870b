/**
 * Node system errors (errno codes) mapped to what they mean here, in one
 * place: every caller that turns an errno into a sentence or a decision asks
 * this module, so the same code never reads two ways in two messages.
 */

/** The errno code of a Node system error, if it is one. */
export function errnoCode(err: unknown): string | undefined {
  if (err && typeof err === 'object' && 'code' in err && typeof err.code === 'string') {
    return err.code;
  }
  return undefined;
}

/**
 * A short lowercase phrase for an errno, for one-line messages
 * ("cannot read x: no such file"); the error's own message when the code is
 * not one an operator meets in this program.
 */
export function describeErrno(err: unknown): string {
  switch (errnoCode(err)) {
    // The path (or a directory on it) does not exist.
    case 'ENOENT':
      return 'no such file';
    // A directory on the path is a file: usually a typo in a configured path.
    case 'ENOTDIR':
      return 'a part of the path is not a directory';
    // Opening a directory as a file.
    case 'EISDIR':
      return 'it is a directory';
    // File mode or ownership refuses us; EPERM is the same for operations
    // (chown, kill, unlink in a sticky directory) rather than for access bits.
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    // O_NOFOLLOW met a symlink: refused on purpose, a symlink may point anywhere.
    case 'ELOOP':
      return 'it is a symlink, which is refused';
    // Something else already listens on that address or socket path.
    case 'EADDRINUSE':
      return 'the address is in use';
    // Nothing listens: a dead process left its socket file, or a port is closed.
    case 'ECONNREFUSED':
      return 'connection refused';
    // The process (or group) is gone.
    case 'ESRCH':
      return 'no such process';
    // The disk (or the inode table) is full.
    case 'ENOSPC':
      return 'no space left on the device';
    // The file system is mounted read-only.
    case 'EROFS':
      return 'the file system is read-only';
    // Too many open files: the agent's or the system's fd limit.
    case 'EMFILE':
    case 'ENFILE':
      return 'too many open files';
    default:
      return err instanceof Error ? err.message : String(err);
  }
}

/** The path does not exist (ENOENT): usually a normal "nothing there yet". */
export const isNotFound = (err: unknown): boolean => errnoCode(err) === 'ENOENT';

/** The process or group is gone (ESRCH): a kill that finds nothing has nothing to do. */
export const isNoSuchProcess = (err: unknown): boolean => errnoCode(err) === 'ESRCH';

/** Access refused by mode, ownership or capability (EACCES, EPERM). */
export const isPermissionDenied = (err: unknown): boolean => {
  const code = errnoCode(err);
  return code === 'EACCES' || code === 'EPERM';
};
