import type http2 from 'node:http2';
import type { TLSSocket } from 'node:tls';

/**
 * Why a request's client certificate is not acceptable, or undefined when it
 * is (or the connection is not TLS). The TLS layer has already verified the
 * chain against the configured CA; this only reads its verdict.
 */
export function clientCertificateProblem(req: http2.Http2ServerRequest | { socket: unknown }): string | undefined {
  const socket = req.socket as Partial<TLSSocket> | undefined;
  if (!socket || typeof socket.getPeerCertificate !== 'function') return undefined;
  if (socket.authorized) return undefined;
  const cert = socket.getPeerCertificate();
  if (!cert || Object.keys(cert).length === 0) {
    return 'no client certificate presented: configure tls.cert and tls.key on the agent';
  }
  const why = socket.authorizationError instanceof Error ? socket.authorizationError.message : String(socket.authorizationError ?? 'not trusted');
  return `client certificate ${JSON.stringify(cert.subject?.CN ?? '')} refused: ${why} (it must be signed by the control plane's tls.ca)`;
}
