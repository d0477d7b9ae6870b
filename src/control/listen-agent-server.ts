import type http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { describeErrno } from '../lib/errno.js';
import { failure } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { type AgentServerTls, createAgentServer } from './create-agent-server.js';

/** After close() asks connections to end, how long before they are destroyed. */
export const CLOSE_TIMEOUT_MS = 2_000;

type RequestHandler = Parameters<typeof createAgentServer>[0];

export interface ListeningAgentServer {
  port: number;
  url: string;
  /**
   * Asks every HTTP/2 session to end; connections still open after
   * CLOSE_TIMEOUT_MS are destroyed, so this always resolves.
   */
  close(): Promise<void>;
}

/** Starts the agent server on `addr` (port 0 picks a free port), tracking its connections so close() can end them. */
export async function listenAgentServer(handler: RequestHandler, tls: AgentServerTls | undefined, addr: { host: string; port: number }, log: Logger): Promise<ListeningAgentServer> {
  const sockets = new Set<Socket>();
  const h2sessions = new Set<http2.ServerHttp2Session>();
  const server = createAgentServer(handler, tls);
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('session', (session: http2.ServerHttp2Session) => {
    h2sessions.add(session);
    session.once('close', () => h2sessions.delete(session));
  });
  // A refused client certificate never reaches the service; this is the
  // only place an operator can learn why a node does not register.
  server.on('tlsClientError', (err: Error, socket: { remoteAddress?: string }) => {
    log.warn({ err: err.message, peer: socket.remoteAddress }, 'refused a TLS connection (client certificate missing or not from the configured CA?)');
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => {
      reject(failure(`cannot listen on ${addr.host}:${addr.port}: ${describeErrno(err)}`, { cause: err }));
    };
    server.once('error', onError);
    server.listen(addr.port, addr.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const hostInUrl = addr.host.includes(':') ? `[${addr.host}]` : addr.host;
  const close = () =>
    new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        for (const s of h2sessions) s.destroy();
        for (const s of sockets) s.destroy();
      }, CLOSE_TIMEOUT_MS);
      server.close(() => {
        clearTimeout(force);
        resolve();
      });
      for (const s of h2sessions) s.close();
    });
  return { port, url: `${tls ? 'https' : 'http'}://${hostInUrl}:${port}`, close };
}
