import type http2 from 'node:http2';
import type { TLSSocket } from 'node:tls';

/** OpenSSL's verdicts about a certificate's dates, as Node reports authorizationError (its code). */
const DATE_ERRORS: ReadonlySet<string> = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'certificate has expired', 'certificate is not yet valid']);

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
  // The CA hint only where the CA is the problem: an expired certificate was signed by the right one (walkthrough 2, item 8).
  const hint = DATE_ERRORS.has(why) ? '' : " (it must be signed by the control plane's tls.ca)";
  return `client certificate ${JSON.stringify(cert.subject?.CN ?? '')} refused: ${why}${hint}`;
}
