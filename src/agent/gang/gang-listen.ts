import { type AddressInfo, isIP, type Server } from 'node:net';
import { errnoCode } from '../../lib/errno.js';
import { configError, failure } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { foreignListener, portListeners } from '../../lib/port-listeners.js';

/** How often a gang port held by another process is tried again: a restart's squat ends when its process does. */
export const GANG_PORT_RETRY_MS = 2_000;

export interface GangListenOptions {
  /** The endpoint's TCP front (admittingServer), not yet listening. */
  server: Server;
  /** gang_addr, for the lines that name it. */
  addr: string;
  host: string;
  /** 0 takes a free port. */
  port: number;
  log: Logger;
  /** A socket systemd holds for the agent across restarts (llmgw-gang.socket, takeListenFds): listened on instead of binding. */
  listenFd?: number;
  /** Said once when the port is found held, and once when it is taken back: the agent's event. */
  onHeld?: (message: string, heldBy: { uid: number } | undefined) => void;
  onTaken?: (message: string) => void;
  retryMs?: number;
}

/**
 * Listens for the gang endpoint. With a socket from systemd there is no
 * window: the port stays bound while the agent restarts, so nobody else can
 * take it (security review 4, F5). Without, a port another process holds
 * (a local user who bound it while this agent restarted) does not stop the
 * agent any more (it exited 1 and was restarted for ever, its engines
 * unsupervised): the holder is named by uid, once, and the port tried again
 * every GANG_PORT_RETRY_MS in the background until it is this agent's.
 * Meanwhile what the holder answers is no evidence to the peers: it cannot
 * show this node's certificate, and on loopback its uid is not the agents'
 * (ask-peer.ts). Resolves once listening, or once the hold is reported;
 * any other failure (an address not of this node, a port below 1024 without
 * the right) throws as before.
 */
export async function listenGang(o: GangListenOptions): Promise<void> {
  if (o.listenFd !== undefined) return listenOnFd(o, o.listenFd);
  const first = await tryListen(o.server, o.port, o.host);
  if (first === undefined) return;
  if (first !== 'EADDRINUSE' || o.port === 0) throw failure(`gang_addr ${o.addr}: cannot listen: ${first}`);
  const uid = process.getuid?.() ?? -1;
  const holder = (await foreignListener(o.host, o.port, uid)) ?? (await portListeners(o.port)).find((l) => l.uid === uid);
  const message =
    holder === undefined
      ? `gang_addr ${o.addr} is taken by a socket this agent cannot see (another network namespace, or gone since): not listening; trying again every ${(o.retryMs ?? GANG_PORT_RETRY_MS) / 1000} s`
      : holder.uid !== uid
        ? `gang_addr ${o.addr} is held by uid ${holder.uid} (socket inode ${holder.inode}), not this agent: another user's process took the port; peers refuse what it answers (it cannot show this node's certificate, nor, on loopback, the agents' uid); trying again every ${(o.retryMs ?? GANG_PORT_RETRY_MS) / 1000} s. Find it with: ss -ltnpe 'sport = :${o.port}'`
        : `gang_addr ${o.addr} is held by a process of this agent's user (uid ${uid}, socket inode ${holder.inode}): an agent still stopping, or another service on the port; trying again every ${(o.retryMs ?? GANG_PORT_RETRY_MS) / 1000} s`;
  o.log.error({ endpoint: o.addr, heldByUid: holder?.uid }, message);
  o.onHeld?.(message, holder ? { uid: holder.uid } : undefined);
  const since = Date.now();
  let closed = false;
  o.server.once('close', () => {
    closed = true;
  });
  const retry = () => {
    const t = setTimeout(async () => {
      if (closed) return;
      const r = await tryListen(o.server, o.port, o.host);
      if (closed) {
        if (r === undefined) o.server.close();
        return;
      }
      if (r === undefined) {
        const taken = `gang endpoint listening on ${o.addr} after the port was held for ${Math.round((Date.now() - since) / 1000)} s`;
        o.log.info({ endpoint: o.addr }, taken);
        o.onTaken?.(taken);
      } else retry();
    }, o.retryMs ?? GANG_PORT_RETRY_MS);
    t.unref();
  };
  retry();
}

/** listen(port, host): undefined once listening, or the error's code (its message when it has none). */
function tryListen(server: Server, port: number, host: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const onError = (err: Error) => resolve(errnoCode(err) ?? err.message);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve(undefined);
    });
  });
}

async function listenOnFd(o: GangListenOptions, fd: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    o.server.once('error', (err) => reject(failure(`gang_addr ${o.addr}: cannot listen on the socket systemd passed (fd ${fd}): ${err.message}`)));
    o.server.listen({ fd }, () => resolve());
  });
  const bound = o.server.address() as AddressInfo | null;
  // The socket unit and gang_addr are two files an operator edits: a port that differs would be announced wrong to every peer.
  // And the address: ListenStream=7471 listens on every interface, which would put a loopback gang_addr (plaintext) on the network.
  const sameHost = isIP(o.host) === 0 || sameAddress(bound?.address ?? '', o.host);
  if (bound === null || (o.port !== 0 && bound.port !== o.port) || !sameHost) {
    o.server.close();
    throw configError(
      `the socket systemd passed for the gang endpoint (llmgw-gang.socket, fd ${fd}) listens on ${bound ? `${bound.address}:${bound.port}` : 'nothing TCP'}, and gang_addr says ${o.addr}: set ListenStream= to gang_addr's address and port (e.g. ListenStream=10.0.0.5:7471 with FreeBind=yes)`,
    );
  }
  o.log.info({ endpoint: o.addr, fd }, 'gang endpoint listens on the socket systemd holds across agent restarts (llmgw-gang.socket)');
}

/** One address however spelt: ::ffff:10.0.0.5 is 10.0.0.5; IPv6 compared by its groups. */
function sameAddress(a: string, b: string): boolean {
  const n = (x: string) => {
    const h = x.replace(/^\[|\]$/g, '').toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, '$1');
    if (isIP(h) !== 6) return h;
    const [head = '', tail = ''] = h.split('::');
    const l = head === '' ? [] : head.split(':');
    const r = tail === '' ? [] : tail.split(':');
    const groups = h.includes('::') ? [...l, ...Array<string>(8 - l.length - r.length).fill('0'), ...r] : l;
    return groups.map((g) => Number.parseInt(g, 16).toString(16)).join(':');
  };
  return n(a) === n(b);
}
