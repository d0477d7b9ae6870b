import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import type { Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { configError, errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { keyPairProblem } from '../../lib/check-key-pair.js';
import { readPemFile } from '../../lib/read-pem-file.js';
import { GuardedHttp2SessionManager } from './guarded-session-manager.js';
import { type Protocol, type TlsConfig, tlsEnabled } from '../config/agent-config.js';

/** Largest control message accepted: far above a StartShard with a 1 MiB env value, far below memory trouble. */
export const CONTROL_MESSAGE_MAX_BYTES = 16 * 1024 * 1024;

/**
 * The operating system's CA bundles, first found wins (Debian/Ubuntu,
 * RHEL/Fedora, SUSE, Alpine/macOS-style). Node 20 has no
 * tls.getCACertificates('system'): its default roots are its own compiled-in
 * Mozilla bundle, so a CA the operator installed on the node (an enterprise
 * root) would not be trusted although the docs say "system roots".
 */
export const SYSTEM_CA_BUNDLES: readonly string[] = [
  '/etc/ssl/certs/ca-certificates.crt',
  '/etc/pki/tls/certs/ca-bundle.crt',
  '/etc/ssl/ca-bundle.pem',
  '/etc/ssl/cert.pem',
];

/** How often the expiry warning repeats for the same certificate: once per connection attempt would flood a backoff loop. */
const EXPIRY_WARNING_REPEAT_MS = 3_600_000;

export interface TransportOptions {
  server: string;
  protocol: Protocol;
  /** expiryWarningMs may be absent for callers that predate it; 7 days then. */
  tls: Omit<TlsConfig, 'expiryWarningMs'> & { expiryWarningMs?: number };
  /**
   * HTTP/2 PING period. A control plane that accepts the connection and then
   * never answers would otherwise hold the agent's only stream for ever; an
   * unanswered ping closes it and the agent reconnects.
   */
  pingIntervalMs: number;
  pingTimeoutMs: number;
  /** Where the key-mode, expiry and rotation notices go; silent without one. */
  logger?: Logger;
  /** For tests: the OS bundles tried when tls.ca is empty, and the environment (NODE_EXTRA_CA_CERTS). */
  systemCaBundles?: readonly string[];
  env?: NodeJS.ProcessEnv;
  nowMs?: () => number;
  /** Told what each (re)connection loaded, for `ctl status`. */
  onTlsLoaded?: (loaded: LoadedTls) => void;
}

/** The TLS files as one (re)connection loaded them: what `ctl status` shows and what a refused handshake is explained by. */
export interface LoadedTls {
  /** tls.cert, or '' when the agent presents no client certificate. */
  certPath: string;
  /** The client certificate's facts; absent without one. */
  cert?: { subject: string; notBeforeMs: number; notAfterMs: number; fingerprint256: string };
  /** tls.ca, or SYSTEM_TRUST_STORE. */
  ca: string;
  expiryWarningMs: number;
}

export const SYSTEM_TRUST_STORE = 'system trust store';

const DEFAULT_EXPIRY_WARNING_MS = 7 * 24 * 3_600_000;

/**
 * The HTTP/2 transport to the control plane: h2c for http://, TLS with ALPN
 * for https:// with the client certificate and CA of `tls` (mutual TLS). The
 * server name is left to Node, which takes it from the URL, so the control
 * plane can move without a config change.
 *
 * With TLS, the files are read again for every stream (each (re)connection):
 * short-lived client certificates (cert-manager, Vault, SPIFFE) and a
 * changed CA are used by the next connection without a restart, and so
 * without touching engines. Verification is explicit
 * (rejectUnauthorized: true, TLS 1.2 at least), so
 * NODE_TLS_REJECT_UNAUTHORIZED=0 in a drop-in cannot turn it off.
 */
export function createControlPlaneTransport(opts: TransportOptions): Transport {
  const secure = opts.server.startsWith('https://');
  if (secure !== tlsEnabled({ ...opts.tls, expiryWarningMs: 0 }) && !(secure && opts.tls.ca === '' && opts.tls.cert === '')) {
    // The config loader refuses this already; a programmatic caller gets the same rule.
    throw configError('tls settings and the server scheme disagree: use https:// with tls and http:// without');
  }
  if (!secure) return build(opts, {});

  let fingerprint = '';
  let current: Transport | undefined;
  let keyModeWarned = '';
  let expiryWarnedAt = Number.NEGATIVE_INFINITY;
  const now = opts.nowMs ?? Date.now;

  const refresh = (): Transport => {
    const material = readTlsMaterial(opts);
    if (opts.tls.key !== '') {
      const mode = statSync(opts.tls.key).mode & 0o777;
      const marker = `${opts.tls.key}:${mode}`;
      if ((mode & 0o077) !== 0 && keyModeWarned !== marker) {
        keyModeWarned = marker;
        opts.logger?.warn(
          { key: opts.tls.key, mode: mode.toString(8) },
          'the TLS private key may be read by users other than its owner; chmod 0600 it (or 0640 with a root-only group)',
        );
      }
    }
    const digest = createHash('sha256');
    for (const part of [material.cert, material.key, ...material.ca]) digest.update(part ?? '').update('\0');
    const next = digest.digest('hex');
    const loaded = describeLoadedTls(opts, material.cert);
    opts.onTlsLoaded?.(loaded);
    if (loaded.cert && now() - expiryWarnedAt >= EXPIRY_WARNING_REPEAT_MS) {
      const leftMs = loaded.cert.notAfterMs - now();
      if (leftMs <= loaded.expiryWarningMs) {
        expiryWarnedAt = now();
        opts.logger?.warn(
          { cert: opts.tls.cert, subject: loaded.cert.subject, notAfter: new Date(loaded.cert.notAfterMs).toISOString() },
          leftMs <= 0
            ? 'the client certificate has expired; the control plane will refuse it until it is renewed on disk'
            : 'the client certificate expires soon; renew it on disk (the next connection uses the new one)',
        );
      }
    }
    if (current === undefined || next !== fingerprint) {
      // Checked whenever the files change: a rotation that replaced one of
      // the two and not yet the other names both files until it is done,
      // instead of OpenSSL's "key values mismatch". Retried, since the
      // writer may be half-way (the start refuses a mismatch, exit 78).
      if (material.cert && material.key) {
        const problem = keyPairProblem(material.cert, material.key, opts.tls.cert, opts.tls.key);
        if (problem) throw configError(problem);
      }
      if (current !== undefined) opts.logger?.info({ cert: opts.tls.cert, ca: opts.tls.ca || '(system)' }, 'TLS files changed on disk; the new connection uses them');
      fingerprint = next;
      current = build(opts, {
        ...material,
        // Explicit, so the environment cannot downgrade verification.
        rejectUnauthorized: true,
        minVersion: 'TLSv1.2' as const,
      });
    }
    return current;
  };

  return {
    unary: (...args: Parameters<Transport['unary']>) => refresh().unary(...args),
    stream: (...args: Parameters<Transport['stream']>) => refresh().stream(...args),
  } as Transport;
}

function describeLoadedTls(opts: TransportOptions, certPem: Buffer | undefined): LoadedTls {
  const loaded: LoadedTls = {
    certPath: opts.tls.cert,
    ca: opts.tls.ca || SYSTEM_TRUST_STORE,
    expiryWarningMs: opts.tls.expiryWarningMs ?? DEFAULT_EXPIRY_WARNING_MS,
  };
  if (certPem) {
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(certPem);
    } catch (err) {
      // Without this, a half-written or wrong file surfaced as OpenSSL's bare "header too long" from deep in the TLS stack.
      throw configError(`tls.cert: ${opts.tls.cert} is not a PEM certificate (${errorMessage(err)}); replace it with the node's client certificate`, { cause: err });
    }
    loaded.cert = {
      // One line: OpenSSL separates subject parts with newlines.
      subject: leaf.subject.split('\n').join(', '),
      notBeforeMs: Date.parse(leaf.validFrom),
      notAfterMs: Date.parse(leaf.validTo),
      fingerprint256: leaf.fingerprint256,
    };
  }
  return loaded;
}

/**
 * Why the control plane refuses the client certificate `loaded` holds, if its
 * dates alone explain it, else undefined. A server that rejects an expired
 * certificate only sends an alert, which reaches the agent as a bare
 * "alert certificate expired" or a reset connection, with no word of which
 * file to renew.
 */
export function certificateDateProblem(loaded: LoadedTls | undefined, nowMs: number): string | undefined {
  const cert = loaded?.cert;
  if (!cert) return undefined;
  const renew = 'renew it (the agent re-reads it at the next connection)';
  const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
  if (nowMs > cert.notAfterMs) return `the client certificate ${loaded.certPath} expired at ${iso(cert.notAfterMs)}; ${renew}`;
  if (nowMs < cert.notBeforeMs) {
    return `the client certificate ${loaded.certPath} is not valid before ${iso(cert.notBeforeMs)}; check this node's clock or ${renew}`;
  }
  return undefined;
}

function build(opts: TransportOptions, nodeOptions: Record<string, unknown>): Transport {
  const sessionManager = new GuardedHttp2SessionManager(
    opts.server,
    {
      pingIntervalMs: opts.pingIntervalMs,
      pingTimeoutMs: opts.pingTimeoutMs,
      // Heartbeats keep the stream busy, but a quiet stream must be checked too.
      pingIdleConnection: true,
      // The connection of a transport replaced after a certificate rotation
      // closes once idle instead of lingering for connect's default 15 minutes.
      idleConnectionTimeoutMs: 30_000,
    },
    nodeOptions,
    (err) => opts.logger?.debug({ err: errorMessage(err) }, 'an abandoned control-plane connection reported an error; ignored'),
  );
  const common = {
    baseUrl: opts.server,
    httpVersion: '2' as const,
    sessionManager,
    // A control message is a few KiB. Without a bound, garbage on the wire
    // reads as a length prefix of up to 4 GiB, and the client waits (and
    // buffers) for that many bytes instead of failing the stream.
    readMaxBytes: CONTROL_MESSAGE_MAX_BYTES,
  };
  return opts.protocol === 'grpc' ? createGrpcTransport(common) : createConnectTransport(common);
}

interface TlsMaterial {
  cert?: Buffer;
  key?: Buffer;
  ca: Buffer[];
}

/**
 * The PEMs as they are on disk now. With tls.ca empty: the OS bundle plus
 * NODE_EXTRA_CA_CERTS. Node applies that variable only to its own default
 * roots, which an explicit `ca` replaces, so it is read here; Node's bundle
 * is the fallback on a system without one.
 */
function readTlsMaterial(opts: TransportOptions): TlsMaterial {
  const env = opts.env ?? process.env;
  const out: TlsMaterial = { ca: [] };
  // A file not written yet is a TlsFileNotWritten: the connection retries it and says what it waits for.
  const wait = { waitIfMissing: true };
  if (opts.tls.cert) out.cert = readPemFile(opts.tls.cert, 'tls.cert', wait);
  if (opts.tls.key) out.key = readPemFile(opts.tls.key, 'tls.key', wait);
  if (opts.tls.ca) {
    out.ca.push(readPemFile(opts.tls.ca, 'tls.ca', wait));
    return out;
  }
  for (const bundle of opts.systemCaBundles ?? SYSTEM_CA_BUNDLES) {
    try {
      out.ca.push(readFileSync(bundle));
      break;
    } catch {
      // Not this distribution's path; try the next.
    }
  }
  if (out.ca.length === 0) out.ca.push(...rootCertificates.map((pem) => Buffer.from(pem)));
  const extra = env.NODE_EXTRA_CA_CERTS;
  if (extra) out.ca.push(readPemFile(extra, 'NODE_EXTRA_CA_CERTS'));
  return out;
}
