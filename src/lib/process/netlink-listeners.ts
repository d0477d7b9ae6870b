import { libcBinding } from '../libc.js';
import type { ListeningSocket } from './listening-socket-owners.js';

/*
 * The TCP sockets listening on one port, asked of the kernel through
 * NETLINK_SOCK_DIAG (what `ss -ltn sport = :P` does), in place of reading
 * /proc/net/tcp{,6}. A dump that asks for LISTEN only makes the kernel walk
 * its listening hash and skip the established one (inet_diag_dump_icsk),
 * and a source port in the request keeps every other listener out of the
 * answer. Reading /proc/net/tcp6 makes the kernel walk the whole
 * established hash even when it lists nothing: about 2 ms here, per read.
 */

const AF_NETLINK = 16;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_SOCK_DIAG = 4;
const SOCK_DIAG_BY_FAMILY = 20;
const NLM_F_REQUEST = 0x1;
const NLM_F_DUMP = 0x300;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const MSG_DONTWAIT = 0x40;
const AF_INET = 2;
const AF_INET6 = 10;
const IPPROTO_TCP = 6;
const TCP_LISTEN = 10;

const NLMSG_HEADER_BYTES = 16;
/** struct inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid (48 bytes). */
const REQUEST_BYTES = NLMSG_HEADER_BYTES + 56;
/** struct inet_diag_msg, up to and including idiag_inode. */
const DIAG_MSG_BYTES = 72;
const RECEIVE_BYTES = 64 * 1024;
/** A dump of one port's listeners is one or two datagrams; more means something is wrong, not more to read. */
const MAX_DATAGRAMS = 64;

interface Calls {
  socket(domain: number, type: number, protocol: number): number;
  send(fd: number, buf: Buffer, len: number, flags: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  close(fd: number): number;
  errno(): number;
}

const load = libcBinding<Calls>((libc) => {
  // Buffers are passed by pointer to their own memory, so recv writes straight into them.
  const socket = libc.func('int socket(int domain, int type, int protocol)');
  const send = libc.func('long send(int fd, void *buf, size_t len, int flags)');
  const recv = libc.func('long recv(int fd, void *buf, size_t len, int flags)');
  const close = libc.func('int close(int fd)');
  return {
    socket: (d, t, p) => Number(socket(d, t, p)),
    send: (fd, buf, len, flags) => Number(send(fd, buf, len, flags)),
    recv: (fd, buf, len, flags) => Number(recv(fd, buf, len, flags)),
    close: (fd) => Number(close(fd)),
    errno: () => libc.errno(),
  };
});

function request(family: number, port: number): Buffer {
  const b = Buffer.alloc(REQUEST_BYTES);
  b.writeUInt32LE(REQUEST_BYTES, 0);
  b.writeUInt16LE(SOCK_DIAG_BY_FAMILY, 4);
  b.writeUInt16LE(NLM_F_REQUEST | NLM_F_DUMP, 6);
  b.writeUInt32LE(1, 8);
  b.writeUInt8(family, 16);
  b.writeUInt8(IPPROTO_TCP, 17);
  b.writeUInt32LE(1 << TCP_LISTEN, 20);
  // inet_diag_sockid.idiag_sport, network order: only listeners bound to this port.
  b.writeUInt16BE(port, 24);
  return b;
}

/** The address as /proc/net/tcp{,6} writes it: each 32-bit word of the network-order bytes, read in host (little-endian) order, %08X. */
function procHexAddress(bytes: Buffer): string {
  let hex = '';
  for (let i = 0; i < bytes.length; i += 4) hex += bytes.readUInt32LE(i).toString(16).toUpperCase().padStart(8, '0');
  return hex;
}

/**
 * The one receive buffer of every dump: a dump is read synchronously to its
 * end, so no two ever use it at once. A fresh 64 KiB per family per probe
 * was 128 KiB of zeroed memory outside the heap for each health probe of
 * each shard (1.6 MB a second at 64 shards), for a datagram of a few
 * hundred bytes.
 */
let received: Buffer | undefined;
function receiveBuffer(): Buffer {
  received ??= Buffer.allocUnsafeSlow(RECEIVE_BYTES);
  return received;
}

/** Reads one family's dump; throws with errno on any failure. */
function dumpFamily(c: Calls, family: number, port: number, into: ListeningSocket[]): void {
  const fd = c.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) throw new Error(`socket(AF_NETLINK) failed with errno ${c.errno()}`);
  try {
    const req = request(family, port);
    if (c.send(fd, req, req.length, 0) !== req.length) throw new Error(`netlink send failed with errno ${c.errno()}`);
    const buf = receiveBuffer();
    for (let datagram = 0; datagram < MAX_DATAGRAMS; datagram++) {
      // Never blocks the event loop: the kernel queues each part of a dump before the call that asks for it returns.
      const n = c.recv(fd, buf, buf.length, MSG_DONTWAIT);
      if (n < 0) throw new Error(`netlink recv failed with errno ${c.errno()}`);
      for (let off = 0; off + NLMSG_HEADER_BYTES <= n; ) {
        const len = buf.readUInt32LE(off);
        const type = buf.readUInt16LE(off + 4);
        if (len < NLMSG_HEADER_BYTES || off + len > n) throw new Error('netlink answered a malformed message');
        if (type === NLMSG_DONE) return;
        if (type === NLMSG_ERROR) throw new Error(`netlink answered errno ${-buf.readInt32LE(off + NLMSG_HEADER_BYTES)}`);
        if (type === SOCK_DIAG_BY_FAMILY && len >= NLMSG_HEADER_BYTES + DIAG_MSG_BYTES) {
          const m = off + NLMSG_HEADER_BYTES;
          const addressBytes = family === AF_INET ? 4 : 16;
          into.push({
            port: buf.readUInt16BE(m + 4),
            address: procHexAddress(buf.subarray(m + 8, m + 8 + addressBytes)),
            uid: buf.readUInt32LE(m + 64),
            inode: String(buf.readUInt32LE(m + 68)),
          });
        }
        off += (len + 3) & ~3;
      }
    }
    throw new Error('netlink dump did not end');
  } finally {
    c.close(fd);
  }
}

/**
 * The sockets listening on TCP `port`, IPv4 and IPv6, with their owners'
 * uids and inodes, as /proc/net/tcp{,6} would list them; or why they
 * cannot be asked for here (no FFI, netlink refused by a sandbox), in which
 * case the caller reads the tables. Synchronous: a few syscalls, each
 * answered at once.
 */
export function netlinkListeners(port: number): ListeningSocket[] | { unsupported: string } {
  const c = load();
  if ('unsupported' in c) return c;
  const found: ListeningSocket[] = [];
  try {
    dumpFamily(c, AF_INET, port, found);
    dumpFamily(c, AF_INET6, port, found);
  } catch (err) {
    return { unsupported: err instanceof Error ? err.message : String(err) };
  }
  // The kernel filters on the port already; the check keeps a kernel that ignores the filter from misleading.
  return found.filter((s) => s.port === port);
}

/**
 * Every TCP port something listens on in this network namespace, IPv4 and
 * IPv6, from one LISTEN-only dump with no port in the request (the kernel
 * skips the port test when the request's port is 0, inet_diag_dump_icsk);
 * or why it cannot be asked. For the readiness waits of many loading
 * engines: one dump tells all of them whether their port is open yet.
 */
export function netlinkListeningPorts(): Set<number> | { unsupported: string } {
  const c = load();
  if ('unsupported' in c) return c;
  const found: ListeningSocket[] = [];
  try {
    dumpFamily(c, AF_INET, 0, found);
    dumpFamily(c, AF_INET6, 0, found);
  } catch (err) {
    return { unsupported: err instanceof Error ? err.message : String(err) };
  }
  return new Set(found.map((s) => s.port));
}
