import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { X509Certificate } from 'node:crypto';
import type { AddressInfo, Server } from 'node:net';
import { failure } from '../../lib/errors.js';
import { parseEndpoint } from '../../lib/gang-problems.js';
import { isValidShardId } from '../../lib/shard-id.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import { gangAnswer } from './gang-answer.js';
import type { Logger } from '../../lib/logger.js';
import { gangCertProblem } from '../../lib/gang-cert-purpose.js';
import type { GangTlsRead } from './gang-tls.js';
import { admittingServer, CONNECTION_DEADLINE_MS } from './gang-connections.js';
import { type GangListenOptions, listenGang } from './gang-listen.js';
import { certNames, certNamesNode, DEFAULT_PEER_NAME } from '../../lib/cert-names-node.js';
import type { TLSSocket } from 'node:tls';

/** How often a TLS endpoint reads its certificate again: one written after boot, or renewed, is taken up within this. */
const TLS_REREAD_MS = 30_000;

/** At most one line per this long says which certificates were refused for naming no member (the last one named). */
const REFUSED_PEER_LOG_EVERY_MS = 10_000;

/** Node's own bounds, under the front's deadline (gang-connections.ts), which closes every connection first. */
const HEADERS_TIMEOUT_MS = CONNECTION_DEADLINE_MS;

export interface GangEndpointOptions {
  /** `host:port` (gang_addr); port 0 takes a free one. */
  addr: string;
  nodeId: string;
  shards: () => readonly ShardSnapshot[];
  /** Mutual TLS with the fleet's CA when the agent talks TLS to its control plane; plaintext otherwise (readGangTls). */
  tls: () => GangTlsRead;
  log: Logger;
  /** How long a connection may live (CONNECTION_DEADLINE_MS); tests that hold connections on purpose lengthen it. */
  connectionDeadlineMs?: number;
  /** A listening socket systemd passed (llmgw-gang.socket): no window across restarts (listenGang). */
  listenFd?: number;
  /** The port was found held by another process, and later taken: the agent's events (listenGang). */
  onPortHeld?: GangListenOptions['onHeld'];
  onPortTaken?: GangListenOptions['onTaken'];
  /** How often a held port is tried again (GANG_PORT_RETRY_MS when unset); for tests only, which shorten it. */
  portRetryMs?: number;
}

export interface GangEndpoint {
  /** The listening TCP front (admittingServer): close it to stop. */
  server: Server;
  /** What Register.gang_endpoint says: the address asked for, with the port bound. */
  endpoint: string;
}

/**
 * The agent's gang endpoint (issue 40): GET /v1/gangs/<gang id> answers,
 * as JSON, the ranks of that gang this node supervises: their state, whether
 * their engine runs, whether they stalled, and why (gangAnswer). It is read
 * only: it changes nothing on the node, and it says nothing a peer rank of
 * the gang does not already need. With TLS it asks every client for a
 * certificate of the fleet's CA. A TCP front (gang-connections.ts) bounds
 * connections per source address and closes each within 2 s, so hosts that
 * hold connections without asking cannot shut the peers out (security
 * review 4, F1); every answer closes its connection.
 */
export async function serveGangEndpoint(o: GangEndpointOptions): Promise<GangEndpoint> {
  const where = parseEndpoint(o.addr.replace(/:0$/, ':1'));
  if (!where) throw failure(`gang_addr ${JSON.stringify(o.addr)} is not host:port (an IP address or hostname of this node)`);
  const port = Number(o.addr.slice(o.addr.lastIndexOf(':') + 1));
  let peerName = DEFAULT_PEER_NAME;
  let lastRefusalLogMs = 0;
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const m = /^\/v1\/gangs\/([^/?]+)$/.exec(req.url ?? '');
    if (req.method !== 'GET') return void res.writeHead(405, { allow: 'GET' }).end();
    if (!m || !isValidShardId(m[1])) return void res.writeHead(404).end();
    const shards = o.shards();
    const refusal = tlsPeerRefusal(req, m[1], shards, peerName);
    if (refusal !== undefined) {
      const now = Date.now();
      if (now - lastRefusalLogMs >= REFUSED_PEER_LOG_EVERY_MS) {
        o.log.warn({ gang: m[1], peer: req.socket.remoteAddress, names: refusal }, 'gang endpoint refused a peer whose certificate names no member of that gang (tls.peer_name): another node of the fleet, or a stolen certificate');
        lastRefusalLogMs = now;
      }
      return void res.writeHead(403, 'Certificate names no member of this gang', { connection: 'close' }).end();
    }
    const body = JSON.stringify(gangAnswer(o.nodeId, m[1], shards));
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store', connection: 'close' }).end(body);
  };
  const opts = { headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: HEADERS_TIMEOUT_MS };
  // A certificate not good for a TLS server (a renewal of another kind, one written after start) is not served: peers would refuse it anyway.
  const readTls = (): GangTlsRead => {
    const r = o.tls();
    if (!('tls' in r) || !r.tls) return r;
    const problem = gangCertProblem(r.tls.cert, r.tls.certPath ?? 'tls.cert');
    if (problem) return { error: problem };
    const name = r.tls.peerName ?? DEFAULT_PEER_NAME;
    // One that names another node would be refused by every peer: not served (checkGangAddr says so at start).
    if (!rawCertNamesNodeSafe(r.tls.cert, o.nodeId, name)) return { error: `tls.cert ${r.tls.certPath ?? ''} names ${certNames(r.tls.cert)}, not node ${o.nodeId} by tls.peer_name ${JSON.stringify(name)}` };
    peerName = name;
    return r;
  };
  const first = readTls();
  let inner: import('node:http').Server;
  let stopReread = () => {};
  if ('tls' in first && first.tls === undefined) inner = createHttpServer(opts, handle);
  else {
    // Mutual TLS whatever happens: without readable files every handshake fails until they are (never plaintext).
    const https = createHttpsServer(
      { ...opts, ...('tls' in first && first.tls ? { cert: first.tls.cert, key: first.tls.key, ca: first.tls.ca } : {}), requestCert: true, rejectUnauthorized: true, handshakeTimeout: CONNECTION_DEADLINE_MS },
      handle,
    );
    if ('error' in first) o.log.warn({ err: first.error }, 'gang endpoint refuses every peer until the TLS files can be read');
    let said = 'error' in first;
    const reread = setInterval(() => {
      const r = readTls();
      if ('error' in r) {
        if (!said) o.log.warn({ err: r.error }, 'gang endpoint keeps its previous TLS files');
        said = true;
      } else if (r.tls) {
        https.setSecureContext({ cert: r.tls.cert, key: r.tls.key, ca: r.tls.ca });
        if (said) o.log.info('gang endpoint serves with the TLS files now readable');
        said = false;
      }
    }, TLS_REREAD_MS);
    reread.unref();
    stopReread = () => clearInterval(reread);
    inner = https;
  }
  // The inner server never listens: the front hands it the connections it keeps.
  const server = admittingServer((socket) => inner.emit('connection', socket), { log: o.log, ...(o.connectionDeadlineMs ? { deadlineMs: o.connectionDeadlineMs } : {}) });
  server.on('close', stopReread);
  await listenGang({ server, addr: o.addr, host: where.host, port, log: o.log, listenFd: o.listenFd, onHeld: o.onPortHeld, onTaken: o.onPortTaken, retryMs: o.portRetryMs });
  // Held by another process: announced as configured (a fixed port), and taken once free (listenGang).
  const bound = server.listening ? (server.address() as AddressInfo).port : port;
  const host = where.host.includes(':') ? `[${where.host}]` : where.host;
  if (server.listening) o.log.info({ endpoint: `${host}:${bound}`, tls: !('tls' in first && first.tls === undefined) }, 'gang endpoint listening');
  return { server, endpoint: `${host}:${bound}` };
}

/**
 * Why a TLS peer may not read gang `gangId` (what its certificate names), or
 * undefined: its certificate must name a member of that gang as this node
 * knows it (certNamesNode). A gang this node runs no rank of is answered to
 * any certificate of the fleet (no ranks: that says nothing), so a peer whose
 * rank is gone from here still reads "not supervised".
 */
function tlsPeerRefusal(req: IncomingMessage, gangId: string, shards: readonly ShardSnapshot[], peerName: string): string | undefined {
  const socket = req.socket as Partial<TLSSocket>;
  if (typeof socket.getPeerX509Certificate !== 'function') return undefined;
  const members = new Set<string>();
  for (const s of shards) if (s.spec.gang?.gangId === gangId) for (const m of s.spec.gang.members) members.add(m.nodeId);
  if (members.size === 0) return undefined;
  const cert = socket.getPeerX509Certificate();
  if (cert === undefined) return 'no certificate';
  for (const node of members) if (certNamesNode(cert, node, peerName)) return undefined;
  return certNames(cert.raw);
}

function rawCertNamesNodeSafe(pem: Buffer, nodeId: string, peerName: string): boolean {
  try {
    return certNamesNode(new X509Certificate(pem), nodeId, peerName);
  } catch {
    // Does not parse: the TLS context says so where it is made.
    return true;
  }
}
