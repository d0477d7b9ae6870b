import http2 from 'node:http2';
import { readPemFile } from '../lib/read-pem-file.js';

/** PEM file paths for mutual TLS. */
export interface AgentServerTls {
  /** The server's certificate chain. */
  cert: string;
  /** Its private key. */
  key: string;
  /** The CA bundle client certificates must chain to. */
  ca: string;
}

type RequestHandler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void;

/**
 * The HTTP/2 server the agent service runs on: h2c without `tls`, otherwise
 * TLS that asks for a client certificate and verifies it against `tls.ca`.
 * A node that cannot prove who it is must not register and be handed models.
 *
 * The verdict is enforced per request (clientCertificateProblem) rather than
 * by failing the handshake: under TLS 1.3 a handshake refusal reaches the
 * client only as a cancelled HTTP/2 stream, and an agent that cannot say why
 * it is refused is one an operator cannot fix. Refused here, the agent gets
 * Unauthenticated with the reason.
 */
export function createAgentServer(handler: RequestHandler, tls?: AgentServerTls): http2.Http2Server | http2.Http2SecureServer {
  if (!tls) return http2.createServer(handler);
  return http2.createSecureServer(
    {
      cert: readPemFile(tls.cert, 'tls cert'),
      key: readPemFile(tls.key, 'tls key'),
      ca: readPemFile(tls.ca, 'tls ca'),
      requestCert: true,
      // Verified, then enforced on every request by the control plane; see above.
      rejectUnauthorized: false,
      // gRPC-web and Connect unary clients may speak HTTP/1.1 over TLS.
      allowHTTP1: true,
    },
    handler,
  );
}
