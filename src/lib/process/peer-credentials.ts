import type { Socket } from 'node:net';
import { libcBinding } from '../libc.js';

/** Who is at the other end of a Unix socket connection, as the kernel recorded it at connect(). */
export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

const SOL_SOCKET = 1;
const SO_PEERCRED = 17;
const UCRED_BYTES = 12;

/** Why a peer's credentials could not be read, for the refusal and the log to say. */
export interface UnknownPeer {
  unknown: string;
}

const getPeerCred = libcBinding((libc) => {
  // struct ucred of <sys/socket.h>, under a name of our own in koffi's registry.
  libc.koffi.struct('llmgw_ucred', { pid: 'int32', uid: 'uint32', gid: 'uint32' });
  const getsockopt = libc.func('int getsockopt(int fd, int level, int name, _Out_ llmgw_ucred *value, _Inout_ uint32_t *length)');
  return {
    read(fd: number): PeerCredentials | UnknownPeer {
      const value = { pid: 0, uid: 0, gid: 0 };
      const length = [UCRED_BYTES];
      if (Number(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, value, length)) !== 0) return { unknown: `getsockopt(SO_PEERCRED) failed with errno ${libc.errno()}` };
      return { pid: value.pid, uid: value.uid, gid: value.gid };
    },
  };
});

/**
 * The peer's pid, uid and gid of an accepted Unix-socket connection
 * (getsockopt SO_PEERCRED, which Node does not offer), or why they cannot
 * be read: no FFI (koffi or libc.so.6 does not load, as on musl), a kernel
 * that refuses the call (a seccomp filter), a socket not backed by an fd.
 * Synchronous and a single syscall, so it can run in the accept callback
 * before anything else is done for the connection.
 */
export function readPeerCredentials(socket: Socket): PeerCredentials | UnknownPeer {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) return { unknown: 'the connection has no file descriptor' };
  const bound = getPeerCred();
  return 'unsupported' in bound ? { unknown: bound.unsupported } : bound.read(fd);
}

/** readPeerCredentials without the reason: undefined where they cannot be read. */
export function peerCredentials(socket: Socket): PeerCredentials | undefined {
  const read = readPeerCredentials(socket);
  return 'unknown' in read ? undefined : read;
}
