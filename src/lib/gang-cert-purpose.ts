import { X509Certificate } from 'node:crypto';

const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';

/**
 * Why the agent's certificate `certPem` (file `certPath`) cannot serve the
 * gang endpoint, or undefined when it can, or when it does not parse (that
 * is reported where the file is used). The endpoint serves it to its peers
 * as a TLS *server* certificate and asks them with it as a *client* one, so
 * an extendedKeyUsage must list both serverAuth and clientAuth; none at all
 * means any purpose. A client-only node certificate (the common kind) would
 * fail every peer's check with INVALID_PURPOSE, a gang fenced about 10 s
 * after READY with nothing said at start (security review 4, F6).
 * OpenSSL does not take anyExtendedKeyUsage alone for a TLS server
 * (crypto/x509/v3_purp.c, xku_reject with XKU_SSL_SERVER), so neither does
 * this check.
 */
export function gangCertProblem(certPem: Buffer, certPath: string): string | undefined {
  let usage: string[] | undefined;
  try {
    usage = new X509Certificate(certPem).keyUsage;
  } catch {
    return undefined;
  }
  if (usage === undefined || usage.length === 0) return undefined;
  const lacks = [usage.includes(SERVER_AUTH) ? undefined : 'serverAuth', usage.includes(CLIENT_AUTH) ? undefined : 'clientAuth'].filter((x) => x !== undefined);
  if (lacks.length === 0) return undefined;
  const has = usage.map((oid) => (oid === SERVER_AUTH ? 'serverAuth' : oid === CLIENT_AUTH ? 'clientAuth' : oid)).join(', ');
  return `tls.cert ${certPath} has extendedKeyUsage ${has}, without ${lacks.join(' and ')}: the gang endpoint (gang_addr) serves it to its peers as a TLS server certificate and asks them with it as a client one; issue this node's certificate with extendedKeyUsage serverAuth and clientAuth (or none), or unset gang_addr`;
}
