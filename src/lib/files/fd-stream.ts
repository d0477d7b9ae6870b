import { closeSync } from 'node:fs';
import { Socket } from 'node:net';

/**
 * A readable stream over any fd that epoll can watch (a pidfd, a character
 * device such as /dev/kmsg, a FIFO), read by libuv on the agent's own event
 * loop: no libuv pool thread is held while it waits, and nothing polls.
 *
 * pipe_wrap is the only way to give libuv an fd that is neither a file, a
 * pipe, a socket nor a tty: net.Socket({ fd }) refuses a pidfd's anon inode
 * or a character device ("Unsupported fd type"). It is on Node's
 * process.binding allow list; if a later Node drops it, this reports
 * unsupported and the caller falls back to polling, rather than failing.
 *
 * On success the socket owns the fd (destroying it closes the fd); on
 * failure the fd is closed here. The socket does not keep the process alive.
 */
export function openFdStream(fd: number): { socket: Socket } | { unsupported: string } {
  const Pipe = pipeConstructor();
  if (typeof Pipe === 'string') {
    closeFd(fd);
    return { unsupported: Pipe };
  }
  const handle = Pipe();
  const rc = handle.open(fd);
  if (rc !== 0) {
    closeFd(fd);
    return { unsupported: `libuv cannot watch fd ${fd} (uv_pipe_open: ${rc})` };
  }
  const socket = new Socket({ handle, readable: true, writable: false } as unknown as ConstructorParameters<typeof Socket>[0]);
  socket.unref();
  return { socket };
}

interface PipeHandle {
  open(fd: number): number;
}

let pipe: (() => PipeHandle) | string | undefined;

function pipeConstructor(): (() => PipeHandle) | string {
  if (pipe) return pipe;
  try {
    const binding = (process as unknown as { binding(name: string): { Pipe: new (type: number) => PipeHandle; constants: { SOCKET: number } } }).binding('pipe_wrap');
    pipe = () => new binding.Pipe(binding.constants.SOCKET);
  } catch (err) {
    pipe = `no libuv pipe binding: ${err instanceof Error ? err.message : String(err)}`;
  }
  return pipe;
}

export function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed: nothing leaks.
  }
}
