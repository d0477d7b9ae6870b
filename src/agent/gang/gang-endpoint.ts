import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { failure } from '../../lib/errors.js';
import { parseEndpoint } from '../../lib/gang-problems.js';
import { isValidShardId } from '../../lib/shard-id.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import { gangAnswer } from './gang-answer.js';
import type { Logger } from '../../lib/logger.js';
import type { GangTlsRead } from './gang-tls.js';

/** How often a TLS endpoint reads its certificate again: one written after boot, or renewed, is taken up within this. */
const TLS_REREAD_MS = 30_000;

/** Slow clients get this long for their request line and headers: the endpoint serves peers polling every second. */
const HEADERS_TIMEOUT_MS = 5_000;
/** Connections open at once: a gang's peers need a few; a flood past this is refused, not served (security review 3, S10's rule). */
const MAX_CONNECTIONS = 64;

export interface GangEndpointOptions {
  /** `host:port` (gang_addr); port 0 takes a free one. */
  addr: string;
  nodeId: string;
  shards: () => readonly ShardSnapshot[];
  /** Mutual TLS with the fleet's CA when the agent talks TLS to its control plane; plaintext otherwise (readGangTls). */
  tls: () => GangTlsRead;
  log: Logger;
}

export interface GangEndpoint {
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
 * certificate of the fleet's CA.
 */
export async function serveGangEndpoint(o: GangEndpointOptions): Promise<GangEndpoint> {
  const where = parseEndpoint(o.addr.replace(/:0$/, ':1'));
  if (!where) throw failure(`gang_addr ${JSON.stringify(o.addr)} is not host:port (an IP address or hostname of this node)`);
  const port = Number(o.addr.slice(o.addr.lastIndexOf(':') + 1));
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const m = /^\/v1\/gangs\/([^/?]+)$/.exec(req.url ?? '');
    if (req.method !== 'GET') return void res.writeHead(405, { allow: 'GET' }).end();
    if (!m || !isValidShardId(m[1])) return void res.writeHead(404).end();
    const body = JSON.stringify(gangAnswer(o.nodeId, m[1], o.shards()));
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(body);
  };
  const opts = { headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: HEADERS_TIMEOUT_MS * 2 };
  const first = o.tls();
  let server: Server;
  if ('tls' in first && first.tls === undefined) server = createHttpServer(opts, handle);
  else {
    // Mutual TLS whatever happens: without readable files every handshake fails until they are (never plaintext).
    const https = createHttpsServer({ ...opts, ...('tls' in first ? first.tls : {}), requestCert: true, rejectUnauthorized: true }, handle);
    if ('error' in first) o.log.warn({ err: first.error }, 'gang endpoint refuses every peer until the TLS files can be read');
    let said = 'error' in first;
    const reread = setInterval(() => {
      const r = o.tls();
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
    https.on('close', () => clearInterval(reread));
    server = https;
  }
  server.maxConnections = MAX_CONNECTIONS;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(failure(`gang_addr ${o.addr}: cannot listen: ${err.message}`)));
    server.listen(port, where.host, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const host = where.host.includes(':') ? `[${where.host}]` : where.host;
  o.log.info({ endpoint: `${host}:${bound}`, tls: !('tls' in first && first.tls === undefined) }, 'gang endpoint listening');
  return { server, endpoint: `${host}:${bound}` };
}
