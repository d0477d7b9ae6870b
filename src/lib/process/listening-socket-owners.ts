import { closeSync, openSync, readFileSync, readSync, readdirSync, readlinkSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** TCP state LISTEN in /proc/net/tcp{,6} (include/net/tcp_states.h). */
const TCP_LISTEN = '0A';

export interface ListeningSocketOwnersOptions {
  /** Only these pids are examined (a shard's process group, say); every process when absent. */
  candidates?: readonly number[];
  /** For tests; default /proc. */
  procRoot?: string;
}

/** One socket in LISTEN state, as /proc/net/tcp{,6} describes it. */
export interface ListeningSocket {
  port: number;
  inode: string;
  /** The socket's owner (effective uid of whoever created it): the kernel's word, readable by anyone. */
  uid: number;
  /** Local address as the table writes it (hex), e.g. 0100007F for 127.0.0.1. */
  address: string;
}

/** Bytes asked of the kernel per read of a table: it generates about as many lines as fit. */
const TABLE_CHUNK_BYTES = 8192;

/**
 * Whether the kernel lists LISTEN sockets before all others in
 * /proc/net/tcp{,6}, learnt once from a full read. Linux walks its
 * listening hash before the established one (net/ipv4/tcp_ipv4.c,
 * tcp_seq_start), so a reader can stop at the first line in another
 * state and never make the kernel write the rest: on a node with
 * thousands of connections (the router's, to every engine) a full read
 * costs milliseconds of kernel time, and the readiness wait reads it 20
 * times a second per loading shard. Checked rather than assumed: a kernel
 * that orders them otherwise gets full reads, so no listener is missed.
 */
let listenersComeFirst: boolean | undefined;

function parseListeners(text: string, into: ListeningSocket[]): { sawOther: boolean; orderHeld: boolean } {
  let sawOther = false;
  let orderHeld = true;
  for (const line of text.split('\n').slice(1)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    const f = line.trim().split(/\s+/);
    const local = f[1];
    if (local === undefined || f[3] === undefined) continue;
    if (f[3] !== TCP_LISTEN) {
      sawOther = true;
      continue;
    }
    if (sawOther) orderHeld = false;
    const colon = local.lastIndexOf(':');
    const inode = f[9];
    const uid = Number(f[7]);
    if (inode === undefined || inode === '0' || !Number.isInteger(uid)) continue;
    into.push({ port: Number.parseInt(local.slice(colon + 1), 16), inode, uid, address: local.slice(0, colon) });
  }
  return { sawOther, orderHeld };
}

/** The LISTEN lines of one table: read in chunks up to the first line in another state, or whole (see listenersComeFirst). */
function readTableListeners(path: string, into: ListeningSocket[]): void {
  if (listenersComeFirst !== true) {
    const { orderHeld } = parseListeners(readFileSync(path, 'utf8'), into);
    listenersComeFirst ??= orderHeld;
    if (!orderHeld) listenersComeFirst = false;
    return;
  }
  const fd = openSync(path, 'r');
  try {
    const chunk = Buffer.allocUnsafe(TABLE_CHUNK_BYTES);
    let text = '';
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      text += chunk.toString('latin1', 0, n);
      const complete = text.lastIndexOf('\n');
      // Only whole lines are judged; a line in another state ends the LISTEN part.
      if (complete >= 0 && /\n\s*\d+: \S+ \S+ (?!0A)[0-9A-F]{2} /.test(text.slice(0, complete + 1))) break;
    }
    parseListeners(text.slice(0, text.lastIndexOf('\n') + 1), into);
  } finally {
    closeSync(fd);
  }
}

/**
 * Every socket in LISTEN state, over IPv4 and IPv6, on any address. Throws
 * only when neither table can be read (no /proc): then nobody can tell who
 * listens, which is not the same as nobody listening. Synchronous: the
 * LISTEN part of the tables is small and made by the kernel, which a
 * thread-pool round trip would only add to.
 */
export async function readListeningSockets(procRoot = '/proc'): Promise<ListeningSocket[]> {
  const found: ListeningSocket[] = [];
  let readOne = false;
  let firstError: unknown;
  for (const table of ['net/tcp', 'net/tcp6']) {
    try {
      readTableListeners(join(procRoot, table), found);
      readOne = true;
    } catch (err) {
      // No IPv6 in this kernel or namespace: nothing listens there.
      firstError ??= err;
    }
  }
  if (!readOne) throw firstError;
  return found;
}

/**
 * The sockets listening on TCP `port`, on any address: a squatter on
 * 127.0.0.1:P answers the agent's probes just as an engine on 0.0.0.0:P
 * would. Throws as readListeningSockets does.
 */
export async function listeningSockets(port: number, procRoot = '/proc'): Promise<ListeningSocket[]> {
  return (await readListeningSockets(procRoot)).filter((s) => s.port === port);
}

/** Inodes of the sockets listening on TCP `port` (see listeningSockets); empty when the tables cannot be read. */
export async function listeningSocketInodes(port: number, procRoot = '/proc'): Promise<Set<string>> {
  const sockets = await listeningSockets(port, procRoot).catch(() => []);
  return new Set(sockets.map((s) => s.inode));
}

/**
 * The inodes of the sockets `pid` holds open (`socket:[inode]` fd links);
 * undefined when its fds cannot be read: gone, or another user's process
 * and this one not root (or /proc mounted hidepid).
 */
export function socketInodesOf(pid: number, procRoot = '/proc'): Set<string> | undefined {
  // Synchronous: links in /proc are made by the kernel on the spot, and a
  // thread-pool round trip per fd (hundreds for an engine holding CUDA
  // devices) would delay READY by more than the reads themselves take.
  let fds: string[];
  try {
    fds = readdirSync(join(procRoot, String(pid), 'fd'));
  } catch {
    return undefined;
  }
  const inodes = new Set<string>();
  for (const fd of fds) {
    let target: string;
    try {
      target = readlinkSync(join(procRoot, String(pid), 'fd', fd));
    } catch {
      continue; // closed meanwhile
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(m[1] as string);
  }
  return inodes;
}

/**
 * The pids holding a socket that listens on TCP `port`: the LISTEN sockets'
 * inodes from /proc/net/tcp and tcp6, matched against /proc/<pid>/fd links
 * (`socket:[inode]`). Whoever answers on an engine's port is an engine only
 * if this names one of its processes; a local user who bound the port while
 * the engine loaded does not pass (review finding 2). A process that exits
 * or closes its fds meanwhile is skipped, not an error; reading another
 * user's fds needs root (or the same uid), which the agent has.
 */
export async function listeningSocketOwners(port: number, opts: ListeningSocketOwnersOptions = {}): Promise<number[]> {
  const procRoot = opts.procRoot ?? '/proc';
  const inodes = await listeningSocketInodes(port, procRoot);
  if (inodes.size === 0) return [];
  const pids = opts.candidates ?? (await readdir(procRoot)).filter((n) => /^\d+$/.test(n)).map(Number);
  const owners: number[] = [];
  for (const pid of pids) {
    const held = socketInodesOf(pid, procRoot);
    if (held && [...held].some((i) => inodes.has(i))) owners.push(pid);
  }
  return owners.sort((a, b) => a - b);
}
