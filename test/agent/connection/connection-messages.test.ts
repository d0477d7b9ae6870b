import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { until } from '../../helpers/engine-processes.js';
import { makeTestCerts, type TestCerts } from '../../helpers/make-test-certs.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';
import { runTestConnection } from '../../helpers/test-connection.js';

/*
 * Walkthrough 2, item 8: the line an operator reads when the agent cannot
 * connect must point at the setting to fix. Each case is a real server.
 */


let certs: TestCerts;
beforeAll(async () => {
  certs = await makeTestCerts('node-a');
});
afterAll(() => certs?.cleanup());

/** A connection to `server` until the test ends; the first retry's error, as the log and `ctl status` say it. */
async function firstError(server: string, tls = { cert: '', key: '', ca: '' }): Promise<string> {
  const { connection, records } = runTestConnection('node-a', { server, tls: { ...tls, expiryWarningMs: 0 }, registerTimeoutMs: 5_000, reconnectBaseMs: 100 });
  await until(() => records.some((r) => r.msg === 'cannot reach the control plane; retrying'), 'a failed attempt', 20_000);
  const logged = String(records.find((r) => r.msg === 'cannot reach the control plane; retrying')?.err);
  expect(connection.status().lastError ?? logged).toBe(logged);
  return logged;
}

async function listening(server: ReturnType<typeof createServer>): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

describe('why the agent cannot reach the control plane, pointing at the setting to fix', () => {
  it('names `server` when it answers HTTP/1.1 (a web server, a proxy), not ERR_HTTP2_ERROR', async () => {
    const web = createServer((_req, res) => res.end('hello'));
    const port = await listening(web);
    const why = await firstError(`http://127.0.0.1:${port}`);
    console.info(why);
    expect(why).toMatch(new RegExp(`^server http://127\\.0\\.0\\.1:${port} answered HTTP/1\\.1, not gRPC/Connect over HTTP/2: check \`server\``));
  });

  it('names `server` when an https server speaks only HTTP/1.1', async () => {
    const web = createTlsServer({ cert: readFileSync(certs.serverCert), key: readFileSync(certs.serverKey) }, (_req, res) => res.end('hello'));
    const port = await listening(web);
    const why = await firstError(`https://127.0.0.1:${port}`, { cert: certs.clientCert, key: certs.clientKey, ca: certs.ca });
    console.info(why);
    expect(why).toMatch(new RegExp(`^server https://127\\.0\\.0\\.1:${port} answered HTTP/1\\.1, not gRPC/Connect over HTTP/2 \\(its TLS offers no h2\\): check \`server\``));
  });

  it('names tls.ca and its file when the control plane is signed by another CA', async () => {
    const { url } = await startControlPlane({ tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.ca } });
    const why = await firstError(url.replace('http://', 'https://'), { cert: certs.clientCert, key: certs.clientKey, ca: certs.otherCa });
    console.info(why);
    expect(why).toContain(`tls.ca (${certs.otherCa})`);
    expect(why).toMatch(/^the control plane's certificate is not signed by a CA in tls\.ca/);
  });

  it('says the client certificate expired without the irrelevant "must be signed by tls.ca"', async () => {
    const { url } = await startControlPlane({ tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.ca } });
    const why = await firstError(url.replace('http://', 'https://'), { cert: certs.expiredClientCert, key: certs.expiredClientKey, ca: certs.ca });
    console.info(why);
    expect(why).toMatch(/^the client certificate .* expired at /);
    expect(why).not.toMatch(/signed by/);
  });
});
