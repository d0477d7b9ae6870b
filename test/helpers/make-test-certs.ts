import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';

export interface TestCerts {
  dir: string;
  /** The CA the control plane trusts, and that signed the server and client certificates. */
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A second, unrelated CA, and a client certificate it signed: must be refused. */
  otherCa: string;
  otherClientCert: string;
  otherClientKey: string;
  /** A client certificate the CA signed that expired at EXPIRED_CLIENT_NOT_AFTER (valid only 2026-01-01), with its key. */
  expiredClientCert: string;
  expiredClientKey: string;
  /** Removes every generated file. */
  cleanup(): void;
}

/**
 * A throwaway PKI for mutual-TLS tests, made with the openssl binary (EC
 * P-256, valid one day): a CA, a server certificate for 127.0.0.1 and
 * localhost, a client certificate, and a second CA with its own client
 * certificate, and a client certificate that expired in January 2026. Needs
 * `openssl` on PATH.
 */
export const EXPIRED_CLIENT_NOT_AFTER = '2026-01-02T00:00:00Z';

/** For `openssl ca`, the one openssl command that sets explicit validity dates (x509 -req only counts days from now). */
const CA_CONFIG = `[ca]
default_ca = test
[test]
database = index.txt
new_certs_dir = .
serial = ca.srl
policy = any
default_md = sha256
unique_subject = no
[any]
commonName = supplied
`;

export async function makeTestCerts(clientName = 'node-a'): Promise<TestCerts> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-certs-'));
  const p = (name: string) => join(dir, name);
  const openssl = (args: string[]) => execa('openssl', args, { cwd: dir, stdin: 'ignore', timeout: 30_000 });
  try {
    const makeCa = async (name: string) => {
      await openssl([
        'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
        '-keyout', p(`${name}.key`), '-out', p(`${name}.pem`), '-days', '1', '-subj', `/CN=llmgw test ${name}`,
        '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
      ]);
    };
    const makeLeaf = async (name: string, ca: string, cn: string, ext: string) => {
      writeFileSync(p(`${name}.ext`), ext);
      await openssl([
        'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
        '-keyout', p(`${name}.key`), '-out', p(`${name}.csr`), '-subj', `/CN=${cn}`,
      ]);
      await openssl([
        'x509', '-req', '-in', p(`${name}.csr`), '-CA', p(`${ca}.pem`), '-CAkey', p(`${ca}.key`),
        '-CAcreateserial', '-out', p(`${name}.pem`), '-days', '1', '-extfile', p(`${name}.ext`),
      ]);
    };
    await makeCa('ca');
    await makeCa('other-ca');
    await makeLeaf('server', 'ca', 'localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
    await makeLeaf('client', 'ca', clientName, 'extendedKeyUsage=clientAuth\n');
    await makeLeaf('other-client', 'other-ca', clientName, 'extendedKeyUsage=clientAuth\n');
    writeFileSync(p('ca.cnf'), CA_CONFIG);
    writeFileSync(p('index.txt'), '');
    writeFileSync(p('expired-client.ext'), 'extendedKeyUsage=clientAuth\n');
    await openssl([
      'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', p('expired-client.key'), '-out', p('expired-client.csr'), '-subj', `/CN=${clientName}`,
    ]);
    await openssl([
      'ca', '-batch', '-notext', '-config', p('ca.cnf'), '-cert', p('ca.pem'), '-keyfile', p('ca.key'),
      '-in', p('expired-client.csr'), '-out', p('expired-client.pem'), '-extfile', p('expired-client.ext'),
      '-startdate', '20260101000000Z', '-enddate', '20260102000000Z',
    ]);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    dir,
    ca: p('ca.pem'),
    serverCert: p('server.pem'),
    serverKey: p('server.key'),
    clientCert: p('client.pem'),
    clientKey: p('client.key'),
    otherCa: p('other-ca.pem'),
    otherClientCert: p('other-client.pem'),
    otherClientKey: p('other-client.key'),
    expiredClientCert: p('expired-client.pem'),
    expiredClientKey: p('expired-client.key'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A leaf certificate of `certs`' CA for `cn` with the openssl extensions `ext` (e.g. 'extendedKeyUsage=serverAuth,clientAuth\n', or '' for none), in certs.dir. */
export async function makeLeafCert(certs: TestCerts, name: string, cn: string, ext: string): Promise<{ cert: string; key: string }> {
  const p = (f: string) => join(certs.dir, f);
  const openssl = (args: string[]) => execa('openssl', args, { cwd: certs.dir, stdin: 'ignore', timeout: 30_000 });
  writeFileSync(p(`${name}.ext`), ext === '' ? 'basicConstraints=CA:FALSE\n' : ext);
  await openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', p(`${name}.key`), '-out', p(`${name}.csr`), '-subj', `/CN=${cn}`]);
  await openssl([
    'x509', '-req', '-in', p(`${name}.csr`), '-CA', certs.ca, '-CAkey', p('ca.key'),
    '-CAcreateserial', '-out', p(`${name}.pem`), '-days', '1', '-extfile', p(`${name}.ext`),
  ]);
  return { cert: p(`${name}.pem`), key: p(`${name}.key`) };
}
