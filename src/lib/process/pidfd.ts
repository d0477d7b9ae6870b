import { libcBinding } from '../libc.js';
import { openFdStream } from '../files/fd-stream.js';

/**
 * Exit notification for any process, child or not, through a pidfd
 * (`pidfd_open(2)`, Linux ≥ 5.3): the fd becomes readable when the process
 * exits. An adopted engine is not the agent's child, so neither `exit` events
 * nor waitpid see its death; without this the agent finds it by polling /proc
 * (bench figure 3b: 370–460 ms late).
 *
 * The fd is handed to libuv as a stream (lib/files/fd-stream.ts), so the
 * agent's own event loop (epoll) watches it: no thread is parked per engine,
 * and the libuv thread pool, which the agent's file I/O and DNS share with
 * only four threads, is never taken. libuv reads the fd when epoll says it is
 * readable; read(2) on a pidfd always fails with EINVAL, and that error is
 * the exit notification.
 * (A koffi async poll(2) would block one pool thread per engine: eight
 * adopted engines would stall every fs call of the agent.)
 */

/** What watchPidExit could do. */
export type PidWatch =
  /** onExit is called once, when the process exits (or is already a zombie), unless the signal aborts first. */
  | { kind: 'watching' }
  /** No process has this pid now: it exited and was reaped. onExit is not called. */
  | { kind: 'gone' }
  /** No pidfd here (old kernel, seccomp, no FFI): the caller must poll /proc instead. */
  | { kind: 'unsupported'; reason: string };

/** x86_64, aarch64 and every other architecture on the generic syscall table share it (since 5.3). */
const SYS_PIDFD_OPEN = 434;

const ENOSYS = 38;
const ESRCH = 3;

interface Backend {
  pidfdOpen(pid: number): { fd: number } | { errno: number };
}

/** Bound on the first watch (see loadLibc): an agent with no adopted engine never needs it. */
const loadBackend = libcBinding<Backend>((libc) => {
  const syscall = libc.func('long syscall(long number, int pid, unsigned int flags)');
  return {
    pidfdOpen(pid) {
      const fd = Number(syscall(SYS_PIDFD_OPEN, pid, 0));
      return fd >= 0 ? { fd } : { errno: libc.errno() };
    },
  };
});

/**
 * Calls onExit once when process `pid` exits, whether or not it is our child.
 * An abort of `signal` stops the watch and closes the fd; onExit is never
 * called after it. The watch does not keep the process alive.
 *
 * A pidfd names the process that has `pid` when it is opened: a caller that
 * knows the engine by its identity (start time, boot id) checks it again
 * after a `watching` answer, so a pid reused between its check and the open
 * is never watched as the engine.
 */
export function watchPidExit(pid: number, signal: AbortSignal, onExit: () => void): PidWatch {
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new RangeError(`pid must be a positive integer, not ${pid}`);
  const b = loadBackend();
  if ('unsupported' in b) return { kind: 'unsupported', reason: `no pidfd: ${b.unsupported}` };
  if (signal.aborted) return { kind: 'watching' };
  const opened = b.pidfdOpen(pid);
  if ('errno' in opened) {
    if (opened.errno === ESRCH) return { kind: 'gone' };
    // ENOSYS: kernel before 5.3; EPERM: a seccomp filter refusing it (some
    // container runtimes); anything else: fall back rather than guess.
    const reason = opened.errno === ENOSYS ? 'pidfd_open is missing (kernel before 5.3)' : `pidfd_open failed with errno ${opened.errno}`;
    return { kind: 'unsupported', reason };
  }
  // From here the socket owns the fd: destroying it closes the pidfd.
  const stream = openFdStream(opened.fd);
  if ('unsupported' in stream) return { kind: 'unsupported', reason: `libuv cannot watch a pidfd: ${stream.unsupported}` };
  const { socket } = stream;
  let done = false;
  const finish = (exited: boolean) => {
    if (done) return;
    done = true;
    signal.removeEventListener('abort', onAbort);
    socket.destroy();
    if (exited) onExit();
  };
  const onAbort = () => finish(false);
  signal.addEventListener('abort', onAbort, { once: true });
  // EINVAL from read(2) is the exit. Any other error or an end also ends
  // the watch, and is reported as an exit too: a watch that ended silently
  // would leave the caller believing the engine alive with nothing watching
  // it. So onExit means "look now": the caller confirms the death with its
  // /proc identity check, as its poll does.
  socket.on('error', () => finish(true));
  socket.on('end', () => finish(true));
  socket.on('data', () => finish(true));
  return { kind: 'watching' };
}
