import { closeSync, constants, fstatSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { errorMessage } from '../errors.js';
import { libcBinding } from '../libc.js';

/** What trying to lock a file came to. */
export type FileLock =
  /** This process holds the lock until `release` or its exit, whichever is first. */
  | { kind: 'held'; release(): void }
  /** Another process holds it; `holderPid` is the pid it wrote, when readable. */
  | { kind: 'busy'; holderPid: number | undefined }
  /** No lock can be taken here (no libc FFI, a read-only directory): `reason` says why. */
  | { kind: 'unsupported'; reason: string };

const LOCK_EX = 2;
const LOCK_NB = 4;
const EINTR = 4;
const EWOULDBLOCK = 11;

const flockCall = libcBinding((libc) => {
  const flock = libc.func('int flock(int fd, int operation)');
  return { flock: (fd: number, operation: number) => Number(flock(fd, operation)), errno: () => libc.errno() };
});

/**
 * Tries once to take an exclusive flock(2) on `path` (created 0600 if
 * missing). The kernel holds it for this process's open file description,
 * so it ends with the process however that ends, SIGKILL and the OOM killer
 * included: no stale lock is ever left to judge, which is what the admin
 * socket's probe-unlink-bind could not promise (review finding 13). The fd
 * is close-on-exec (Node opens every fd so), so engines spawned later never
 * hold it: an engine outliving the agent does not lock the next one out.
 *
 * The holder writes its pid into the file, for the refusal to name it.
 */
export function tryLockFile(path: string): FileLock {
  const libc = flockCall();
  if ('unsupported' in libc) return { kind: 'unsupported', reason: libc.unsupported };
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o600);
  } catch (err) {
    return { kind: 'unsupported', reason: `cannot open ${path}: ${errorMessage(err)}` };
  }
  try {
    if (!fstatSync(fd).isFile()) {
      closeSync(fd);
      return { kind: 'unsupported', reason: `${path} is not a regular file` };
    }
    let errno = 0;
    do {
      errno = libc.flock(fd, LOCK_EX | LOCK_NB) === 0 ? 0 : libc.errno();
    } while (errno === EINTR);
    if (errno === EWOULDBLOCK) {
      closeSync(fd);
      return { kind: 'busy', holderPid: readHolder(path) };
    }
    if (errno !== 0) {
      closeSync(fd);
      return { kind: 'unsupported', reason: `flock ${path} failed with errno ${errno}` };
    }
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`, 0);
  } catch (err) {
    closeSync(fd);
    return { kind: 'unsupported', reason: `cannot lock ${path}: ${errorMessage(err)}` };
  }
  let open = true;
  return {
    kind: 'held',
    release: () => {
      if (open) closeSync(fd);
      open = false;
    },
  };
}

function readHolder(path: string): number | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    const pid = Number.parseInt(readFileSync(fd, 'utf8'), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
