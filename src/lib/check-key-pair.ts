import { createPrivateKey, X509Certificate } from 'node:crypto';

/**
 * Why the private key `keyPem` (file `keyPath`) cannot be the key of the
 * certificate `certPem` (file `certPath`), or undefined when it is, or when
 * either does not parse (that is reported where the file is used, as it
 * always was). Without this check a mismatch surfaced only as OpenSSL's
 * "key values mismatch" at every connection attempt, naming neither file.
 */
export function keyPairProblem(certPem: Buffer, keyPem: Buffer, certPath: string, keyPath: string): string | undefined {
  let cert: X509Certificate;
  let matches: boolean;
  try {
    cert = new X509Certificate(certPem);
    matches = cert.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return undefined;
  }
  if (matches) return undefined;
  return `tls.key ${keyPath} is not the private key of tls.cert ${certPath}; install the key the certificate was issued for (or the certificate of this key)`;
}
