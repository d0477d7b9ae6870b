import { readFileSync } from 'node:fs';
import type { Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { configError, errnoCode } from '../lib/errors.js';
import { type Protocol, type TlsConfig, tlsEnabled } from './config/agent-config.js';

/** Largest control message accepted: far above a StartShard with a 1 MiB env value, far below memory trouble. */
export const CONTROL_MESSAGE_MAX_BYTES = 16 * 1024 * 1024;

export interface TransportOptions {
  server: string;
  protocol: Protocol;
  tls: TlsConfig;
  /**
   * HTTP/2 PING period. A control plane that accepts the connection and then
   * never answers would otherwise hold the agent's only stream for ever; an
   * unanswered ping closes it and the agent reconnects.
   */
  pingIntervalMs: number;
  pingTimeoutMs: number;
}

/**
 * The HTTP/2 transport to the control plane: h2c for http://, TLS with ALPN
 * for https:// with the client certificate and CA of `tls` (mutual TLS). The
 * server name is left to Node, which takes it from the URL, so the control
 * plane can move without a config change.
 */
export function createControlPlaneTransport(opts: TransportOptions): Transport {
  const secure = opts.server.startsWith('https://');
  if (secure !== tlsEnabled(opts.tls) && !(secure && opts.tls.ca === '' && opts.tls.cert === '')) {
    // The config loader refuses this already; a programmatic caller gets the same rule.
    throw configError('tls settings and the server scheme disagree: use https:// with tls and http:// without');
  }
  const nodeOptions = secure
    ? {
        ca: opts.tls.ca ? readPem(opts.tls.ca, 'tls.ca') : undefined,
        cert: opts.tls.cert ? readPem(opts.tls.cert, 'tls.cert') : undefined,
        key: opts.tls.key ? readPem(opts.tls.key, 'tls.key') : undefined,
      }
    : {};
  const common = {
    baseUrl: opts.server,
    httpVersion: '2' as const,
    nodeOptions,
    pingIntervalMs: opts.pingIntervalMs,
    pingTimeoutMs: opts.pingTimeoutMs,
    // Heartbeats keep the stream busy, but a quiet stream must be checked too.
    pingIdleConnection: true,
    // A control message is a few KiB. Without a bound, garbage on the wire
    // reads as a length prefix of up to 4 GiB, and the client waits (and
    // buffers) for that many bytes instead of failing the stream.
    readMaxBytes: CONTROL_MESSAGE_MAX_BYTES,
  };
  return opts.protocol === 'grpc' ? createGrpcTransport(common) : createConnectTransport(common);
}

function readPem(path: string, key: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw configError(`${key}: cannot read ${path}: ${errnoCode(err) ?? String(err)}`, { cause: err });
  }
}
