import { readFile, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';

/** TCP state LISTEN in /proc/net/tcp{,6} (include/net/tcp_states.h). */
const TCP_LISTEN = '0A';

export interface ListeningSocketOwnersOptions {
  /** Only these pids are examined (a shard's process group, say); every process when absent. */
  candidates?: readonly number[];
  /** For tests; default /proc. */
  procRoot?: string;
}

/**
 * Inodes of the sockets listening on TCP `port`, over IPv4 and IPv6, on any
 * address: a squatter on 127.0.0.1:P answers the agent's probes just as an
 * engine on 0.0.0.0:P would.
 */
export async function listeningSocketInodes(port: number, procRoot = '/proc'): Promise<Set<string>> {
  const inodes = new Set<string>();
  for (const table of ['net/tcp', 'net/tcp6']) {
    let text: string;
    try {
      text = await readFile(join(procRoot, table), 'utf8');
    } catch {
      // No IPv6 in this kernel or namespace: nothing listens there.
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      const local = f[1];
      if (local === undefined || f[3] !== TCP_LISTEN) continue;
      const portHex = local.slice(local.lastIndexOf(':') + 1);
      const inode = f[9];
      if (Number.parseInt(portHex, 16) === port && inode !== undefined && inode !== '0') inodes.add(inode);
    }
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
    let fds: string[];
    try {
      fds = await readdir(join(procRoot, String(pid), 'fd'));
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = await readlink(join(procRoot, String(pid), 'fd', fd));
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1] as string)) {
        owners.push(pid);
        break;
      }
    }
  }
  return owners.sort((a, b) => a - b);
}
