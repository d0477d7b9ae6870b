import { readFileSync } from 'node:fs';
import { errorMessage } from '../../lib/errors.js';
import { type TlsConfig, tlsEnabled } from '../config/agent-config.js';

/** The certificate, key and CA the gang endpoint serves and asks with: the agent's own, for its control plane. */
export interface GangTls {
  cert: Buffer;
  key: Buffer;
  ca: Buffer;
  /** The file `cert` was read from, to name it in errors. */
  certPath?: string;
  /** tls.peer_name: what names a peer's node in its certificate (certNamesNode); DEFAULT_PEER_NAME when absent. */
  peerName?: string;
}

/** No TLS (plaintext, as the control-plane link), TLS material read now, or why it cannot be read (never a plaintext fallback). */
export type GangTlsRead = { tls: undefined } | { tls: GangTls } | { error: string };

/**
 * The gang endpoint's TLS from the agent's, read now: none when the agent
 * talks plaintext to its control plane (dev, one machine), mutual TLS with
 * its certificate, key and CA otherwise. Read at each use, as the control
 * plane's client does, so that certificates written after boot (or renewed)
 * are taken up. TLS configured without all three (allowed without gang_addr;
 * checkGangAddr refuses it with one) or unreadable is an error, never
 * plaintext.
 */
export function readGangTls(tls: TlsConfig): GangTlsRead {
  if (!tlsEnabled(tls)) return { tls: undefined };
  const missing = (['cert', 'key', 'ca'] as const).find((k) => tls[k] === '');
  if (missing) return { error: `tls.${missing} is not set; the gang endpoint speaks mutual TLS only` };
  try {
    return { tls: { cert: readFileSync(tls.cert), key: readFileSync(tls.key), ca: readFileSync(tls.ca), certPath: tls.cert, ...(tls.peerName !== undefined ? { peerName: tls.peerName } : {}) } };
  } catch (err) {
    return { error: `the agent's TLS files cannot be read: ${errorMessage(err)}` };
  }
}
