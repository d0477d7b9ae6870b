import { isIP } from 'node:net';
import { listeningSockets } from './process/listening-socket-owners.js';

/** A listening TCP socket of this network namespace, as /proc/net/tcp{,6} lists it. */
export interface PortListener {
  /** Its local address: dotted IPv4 or lowercase uncompressed IPv6 ("0:0:0:0:0:0:0:1"). */
  address: string;
  port: number;
  /** The uid that made the socket: the owner of the process that bound it. */
  uid: number;
  inode: number;
}

/**
 * The sockets listening on TCP `port` in this network namespace
 * (listeningSockets: /proc/net/tcp{,6}, readable by any user), with their
 * addresses decoded; empty when the tables cannot be read.
 */
export async function portListeners(port: number, procRoot = '/proc'): Promise<PortListener[]> {
  const sockets = await listeningSockets(port, procRoot).catch(() => []);
  return sockets.map((l) => ({ address: decodeAddress(l.address), port, uid: l.uid, inode: Number(l.inode) }));
}

/**
 * A socket listening where a connection to `host`:`port` lands (the address
 * itself, or a wildcard of its family; any address when `host` is a name)
 * made by a uid other than `uid`, or undefined. Two sockets may share a port
 * by SO_REUSEPORT only under one uid (net/ipv4/inet_connection_sock.c,
 * inet_csk_bind_conflict), so another uid there is another user's process.
 */
export async function foreignListener(host: string, port: number, uid: number, procRoot?: string): Promise<PortListener | undefined> {
  const want = normalise(host);
  return (await portListeners(port, procRoot)).find((l) => l.uid !== uid && covers(l.address, want));
}

function covers(listening: string, want: string | undefined): boolean {
  if (want === undefined) return true;
  if (listening === want || listening === '0.0.0.0' || listening === '0:0:0:0:0:0:0:0') return true;
  return listening === `0:0:0:0:0:ffff:${want}`;
}

/** An address as decodeAddress writes it, or undefined for a name. */
function normalise(host: string): string | undefined {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (isIP(h) === 4) return h;
  if (isIP(h) !== 6) return undefined;
  if (/^::ffff:\d+\.\d+\.\d+\.\d+$/.test(h)) return h.slice(7);
  const [head = '', tail = ''] = h.split('::');
  const a = head === '' ? [] : head.split(':');
  const b = tail === '' ? [] : tail.split(':');
  const groups = h.includes('::') ? [...a, ...Array<string>(8 - a.length - b.length).fill('0'), ...b] : a;
  return groups.map((g) => Number.parseInt(g, 16).toString(16)).join(':');
}

/** /proc/net/tcp's hex address: 8 digits (IPv4) or 32 (IPv6), each 32-bit word printed in host order, read for a little-endian host (x86-64, arm64: the only kinds the agent runs on). */
function decodeAddress(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((w) => [w.slice(6, 8), w.slice(4, 6), w.slice(2, 4), w.slice(0, 2)].map((b) => Number.parseInt(b, 16)));
  if (bytes.length === 4) return bytes.join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0)).toString(16));
  // IPv4-mapped: written as such, so that a v4 host matches it.
  if (groups.slice(0, 5).every((g) => g === '0') && groups[5] === 'ffff') return `0:0:0:0:0:ffff:${bytes.slice(12).join('.')}`;
  return groups.join(':');
}
