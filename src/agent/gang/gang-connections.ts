import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from '../../lib/logger.js';

/** Connections one source address may hold at once: a peer's agent asks one at a time (plus its first-to-go asks); a flood from one host stops here (security review 4, F1). */
export const PER_SOURCE_CONNECTIONS = 8;
/** Connections open at once from everyone: the last resort, past every per-source cap (security review 3, S10's rule). */
export const MAX_CONNECTIONS = 64;
/**
 * How long a connection may live: its TLS handshake, request and answer.
 * Every answer closes its connection (one ask, one connection, as askPeer
 * asks), so a peer is done in milliseconds and gives up itself at 1.5 s
 * (GANG_PEER_TIMEOUT_MS); a connection that sent no whole request by then
 * holds a slot for nothing and is closed. Without it Node holds an idle TLS
 * socket for its 120 s handshake timeout and an idle plaintext one until the
 * 30 s check of headersTimeout.
 */
export const CONNECTION_DEADLINE_MS = 2_000;
/** At most one line per this long says what the caps refused. */
const REFUSED_LOG_EVERY_MS = 10_000;

export interface AdmitOptions {
  log: Logger;
  perSource?: number;
  max?: number;
  deadlineMs?: number;
}

/**
 * The TCP front of the gang endpoint: it accepts, bounds connections per
 * source address (and in all), closes each at its deadline, and hands the
 * ones it keeps to `serve` (the HTTP or HTTPS server, which never listens
 * itself: `emit('connection')`, Node's documented way in). A connection past a
 * cap is closed at once: the asker sees a reset, which says nothing of this
 * node (peer-failure.ts: `unknown`), so a stranger filling it never reads as
 * the peer gone.
 */
export function admittingServer(serve: (socket: Socket) => void, o: AdmitOptions): Server {
  const perSource = o.perSource ?? PER_SOURCE_CONNECTIONS;
  const deadlineMs = o.deadlineMs ?? CONNECTION_DEADLINE_MS;
  const bySource = new Map<string, number>();
  let refused = 0;
  let lastSource = '';
  let lastLogMs = 0;
  const front = createServer((socket) => {
    const source = sourceOf(socket.remoteAddress);
    const held = bySource.get(source) ?? 0;
    if (held >= perSource) {
      socket.destroy();
      refused++;
      lastSource = source;
      const now = Date.now();
      if (now - lastLogMs >= REFUSED_LOG_EVERY_MS) {
        o.log.warn({ refused, source: lastSource, perSource }, 'gang endpoint closed connections past the per-source cap: a host holds connections without asking (a flood, or a peer misbehaving)');
        lastLogMs = now;
        refused = 0;
      }
      return;
    }
    bySource.set(source, held + 1);
    const deadline = setTimeout(() => socket.destroy(), deadlineMs);
    deadline.unref();
    socket.once('close', () => {
      clearTimeout(deadline);
      const n = (bySource.get(source) ?? 1) - 1;
      if (n <= 0) bySource.delete(source);
      else bySource.set(source, n);
    });
    // A reset by the client before the inner server listens for errors must not throw.
    socket.on('error', () => {});
    serve(socket);
  });
  front.maxConnections = o.max ?? MAX_CONNECTIONS;
  return front;
}

/** The address a connection came from, one spelling per host: an IPv4-mapped IPv6 address is its IPv4 address. */
function sourceOf(address: string | undefined): string {
  if (address === undefined) return '';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}
