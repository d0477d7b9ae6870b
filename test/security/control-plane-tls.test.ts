import { create } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { X509Certificate } from 'node:crypto';
import { createSecureServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { withCertificateHint } from '../../src/agent/connection/control-plane-connection.js';
import { createControlPlaneTransport } from '../../src/agent/connection/control-plane-transport.js';
import { type AgentMessage, AgentMessageSchema, AgentService, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { EXPIRED_CLIENT_NOT_AFTER, type TestCerts, makeTestCerts } from '../helpers/make-test-certs.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Finding 12 of the security review and issue 17's certificate items, with
 * real TLS: a reference control plane requiring client certificates, the
 * real agent or the agent's own transport, and a throwaway PKI.
 */

/**
 * One throwaway PKI for the tests here that only read it (each costs a dozen
 * openssl runs, seconds on a busy machine); `fresh` gives a test a PKI of
 * its own: a second CA, or files it changes.
 */
let shared: Promise<TestCerts> | undefined;
afterAll(async () => (await shared)?.cleanup());
async function certs(fresh?: 'fresh', name = 'node-a'): Promise<TestCerts> {
  if (!fresh) {
    shared ??= makeTestCerts('node-a');
    return shared;
  }
  const c = await makeTestCerts(name);
  onTestFinished(() => c.cleanup());
  return c;
}

function tmp(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sec-tls-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const tlsYaml = (cert: string, key: string, ca: string) => `tls:\n  cert: ${cert}\n  key: ${key}\n  ca: ${JSON.stringify(ca)}\n`;

/** One Register through the agent's transport: what the agent does at every (re)connection. */
async function registerThrough(opts: Parameters<typeof createControlPlaneTransport>[0], nodeId: string): Promise<void> {
  const client = createClient(AgentService, createControlPlaneTransport(opts));
  const abort = new AbortController();
  onTestFinished(() => abort.abort());
  async function* requests(): AsyncIterable<AgentMessage> {
    yield create(AgentMessageSchema, { messageId: 1n, msg: { case: 'register', value: { nodeId, hostname: 'h', version: 'test' } } });
    await new Promise((r) => abort.signal.addEventListener('abort', r));
  }
  const responses = client.connect(requests(), { signal: abort.signal });
  for await (const m of responses) {
    if (m.msg.case === 'ack') return;
  }
}

describe('TLS to the control plane', () => {
  it('NODE_TLS_REJECT_UNAUTHORIZED=0 does not turn verification off', { timeout: 60_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dirs = agentDirs(tmp());
    // The agent trusts another CA than the one that signed the server: verification must fail.
    const agent = startAgentProcess({
      server: url.replace('http://', 'https://'),
      dirs,
      extraYaml: tlsYaml(c.clientCert, c.clientKey, c.otherCa),
      env: { NODE_TLS_REJECT_UNAUTHORIZED: '0' },
    });
    await until(
      () => agent.logs().some((r) => r.msg === 'cannot reach the control plane; retrying' && /certificate/i.test(String(r.err))),
      'a retry log that names the certificate problem',
    );
    expect(cp.nodes().find((n) => n.id === 'node-a')).toBeUndefined();
  });

  it('uses a client certificate and CA replaced on disk at the next connection, without a restart and without touching engines', { timeout: 120_000 }, async () => {
    const first = await certs('fresh');
    const second = await certs('fresh');
    const dir = tmp();
    const files = { cert: join(dir, 'client.pem'), key: join(dir, 'client.key'), ca: join(dir, 'ca.pem') };
    const install = (c: TestCerts) => {
      copyFileSync(c.clientCert, files.cert);
      copyFileSync(c.clientKey, files.key);
      copyFileSync(c.ca, files.ca);
      chmodSync(files.key, 0o600);
    };
    install(first);
    const port = await freePort();
    const one = await startControlPlane({ port, tls: { cert: first.serverCert, key: first.serverKey, ca: first.ca } });
    const dirs = agentDirs(join(dir, 'agent'));
    cleanUpEnginesAfterTest(dirs);
    const agent = startAgentProcess({ server: `https://127.0.0.1:${port}`, dirs, extraYaml: tlsYaml(files.cert, files.key, files.ca) });
    await one.cp.waitFor('node-a', isRegister, 30_000);
    const enginePort = await freePort();
    const ready = one.cp.waitFor('node-a', shardIs('s1', ShardState.READY, ShardState.FAILED), 30_000);
    one.cp.send('node-a', { case: 'start', value: simStart('s1', enginePort) });
    const st = (await ready).msg.value as { state: ShardState; pid: number; error: string };
    expect(ShardState[st.state], st.error).toBe('READY');

    // Rotation: new client certificate from a new CA, and a control plane that accepts only that CA.
    install(second);
    await one.close();
    const two = await startControlPlane({ port, tls: { cert: second.serverCert, key: second.serverKey, ca: second.ca } });
    const reg = (await two.cp.waitFor('node-a', isRegister, 60_000)).msg.value as { runningShards: { shardId: string; pid: number }[] };
    expect(reg.runningShards.map((r) => [r.shardId, r.pid])).toEqual([['s1', st.pid]]);
    process.kill(agent.pid, 0);
    expect(agent.logs().some((r) => r.msg === 'agent starting' && Number(r.time) > agent.startedAtMs + 1000)).toBe(false);
  });

  it('trusts a CA given only in NODE_EXTRA_CA_CERTS when tls.ca is empty', { timeout: 60_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dirs = agentDirs(tmp());
    const registered = cp.waitFor('node-a', isRegister, 30_000);
    startAgentProcess({ server: url.replace('http://', 'https://'), dirs, extraYaml: tlsYaml(c.clientCert, c.clientKey, ''), env: { NODE_EXTRA_CA_CERTS: c.ca } });
    expect((await registered).msg.case).toBe('register');
  });

  it('trusts the operating system\'s bundle when tls.ca is empty, and not Node\'s own alone', { timeout: 60_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const base = { server: url.replace('http://', 'https://'), protocol: 'connect' as const, pingIntervalMs: 5000, pingTimeoutMs: 5000, env: {} };
    const tls = { cert: c.clientCert, key: c.clientKey, ca: '' };
    await registerThrough({ ...base, tls, systemCaBundles: [c.ca] }, 'node-os');
    expect(cp.nodes().some((n) => n.id === 'node-os')).toBe(true);
    // Without it in the OS bundle, the test CA is trusted by nothing.
    await expect(registerThrough({ ...base, tls, systemCaBundles: ['/nonexistent/bundle.pem'] }, 'node-os')).rejects.toThrow(/certificate/i);
  });

  it('warns when the client certificate expires within tls.expiry_warning and when the key is readable by others', { timeout: 60_000 }, async () => {
    const c = await certs('fresh', 'node-warn');
    const { url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    chmodSync(c.clientKey, 0o644);
    const { logger, records } = captureLogger();
    const opts = {
      server: url.replace('http://', 'https://'),
      protocol: 'connect' as const,
      pingIntervalMs: 5000,
      pingTimeoutMs: 5000,
      logger,
      tls: { cert: c.clientCert, key: c.clientKey, ca: c.ca, expiryWarningMs: 2 * 24 * 3_600_000 },
    };
    await registerThrough(opts, 'node-warn');
    expect(records.find((r) => String(r.msg).startsWith('the client certificate expires soon'))).toMatchObject({ subject: 'CN=node-warn' });
    expect(records.find((r) => String(r.msg).startsWith('the TLS private key may be read'))).toMatchObject({ mode: '644' });
    // A certificate valid for a day is not "soon" with a one-hour warning.
    const quiet = captureLogger();
    chmodSync(c.clientKey, 0o600);
    await registerThrough({ ...opts, logger: quiet.logger, tls: { ...opts.tls, expiryWarningMs: 3_600_000 } }, 'node-warn');
    expect(quiet.records.filter((r) => r.level === 40)).toEqual([]);
  });

  it('ctl status shows the client certificate the connection loaded: subject, expiry, fingerprint and CA', { timeout: 60_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dirs = agentDirs(tmp());
    const registered = cp.waitFor('node-show', isRegister, 30_000);
    startAgentProcess({
      nodeId: 'node-show',
      server: url.replace('http://', 'https://'),
      dirs,
      // Two days' warning for a certificate valid one day: marked as expiring.
      extraYaml: `${tlsYaml(c.clientCert, c.clientKey, c.ca)}  expiry_warning: 48h\n`,
    });
    await registered;
    const leaf = new X509Certificate(readFileSync(c.clientCert));
    const r = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(r.exitCode, r.stderr).toBe(0);
    const tls = JSON.parse(r.stdout).connection.tls;
    expect(tls).toEqual({
      certPath: c.clientCert,
      certSubject: 'CN=node-a',
      certNotBefore: new Date(Date.parse(leaf.validFrom)).toISOString().replace('.000Z', 'Z'),
      certNotAfter: new Date(Date.parse(leaf.validTo)).toISOString().replace('.000Z', 'Z'),
      certFingerprintSha256: leaf.fingerprint256,
      ca: c.ca,
      certExpiresSoon: true,
    });
    const human = await runCli(['ctl', 'status', '--socket', dirs.socket]);
    const line = human.stdout.split('\n').find((l) => l.startsWith('tls '));
    expect(line).toContain(`cert ${c.clientCert} (CN=node-a), valid until ${new Date(Date.parse(leaf.validTo)).toISOString()} (expires in `);
    expect(line).toContain(`, sha256 ${leaf.fingerprint256}; ca ${c.ca}`);
  });

  it('says plainly that the client certificate expired when the control plane refuses it, in the log and in ctl status', { timeout: 60_000 }, async () => {
    const c = await certs();
    const { cp, url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const dirs = agentDirs(tmp());
    const agent = startAgentProcess({
      nodeId: 'node-old',
      server: url.replace('http://', 'https://'),
      dirs,
      extraYaml: tlsYaml(c.expiredClientCert, c.expiredClientKey, c.ca),
    });
    const plain = `the client certificate ${c.expiredClientCert} expired at ${EXPIRED_CLIENT_NOT_AFTER}; renew it (the agent re-reads it at the next connection)`;
    await until(
      () => agent.logs().some((r) => r.msg === 'cannot reach the control plane; retrying' && String(r.err).startsWith(plain)),
      'a retry log that says the client certificate expired',
    );
    const r = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(r.exitCode, r.stderr).toBe(0);
    const conn = JSON.parse(r.stdout).connection;
    expect(conn.lastError.startsWith(plain), conn.lastError).toBe(true);
    expect(conn.tls).toMatchObject({ certPath: c.expiredClientCert, certNotAfter: EXPIRED_CLIENT_NOT_AFTER, certExpiresSoon: true });
    expect(cp.nodes().find((n) => n.id === 'node-old')).toBeUndefined();
  });

  it('names the expired certificate when the control plane refuses it in the handshake itself', { timeout: 60_000 }, async () => {
    const c = await certs();
    // What Envoy or a Go control plane does: verification in the handshake, so the agent sees only an alert or a reset.
    const server = createSecureServer({
      cert: readFileSync(c.serverCert),
      key: readFileSync(c.serverKey),
      ca: readFileSync(c.ca),
      requestCert: true,
      rejectUnauthorized: true,
    });
    const refusals: string[] = [];
    server.on('tlsClientError', (err) => refusals.push(String((err as NodeJS.ErrnoException).code ?? err.message)));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const dirs = agentDirs(tmp());
    const agent = startAgentProcess({
      nodeId: 'node-old',
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      dirs,
      extraYaml: tlsYaml(c.expiredClientCert, c.expiredClientKey, c.ca),
    });
    const plain = `the client certificate ${c.expiredClientCert} expired at ${EXPIRED_CLIENT_NOT_AFTER}; renew it`;
    await until(
      () => agent.logs().some((r) => r.msg === 'cannot reach the control plane; retrying' && String(r.err).startsWith(plain)),
      'a retry log that says the client certificate expired',
    );
    expect(refusals.length).toBeGreaterThan(0);
  });

  it('gives no certificate hint for a failure the certificate cannot explain', () => {
    const expired = { certPath: '/x.pem', ca: '/ca.pem', expiryWarningMs: 0, cert: { subject: 'CN=a', notBeforeMs: 0, notAfterMs: 1000, fingerprint256: '' } };
    expect(withCertificateHint('connect ECONNREFUSED 127.0.0.1:9', expired, 5000)).toBe('connect ECONNREFUSED 127.0.0.1:9');
    expect(withCertificateHint('socket hang up (ECONNRESET)', expired, 5000)).toBe(
      'the client certificate /x.pem expired at 1970-01-01T00:00:01Z; renew it (the agent re-reads it at the next connection) (socket hang up (ECONNRESET))',
    );
    const early = { ...expired, cert: { ...expired.cert, notBeforeMs: 10_000, notAfterMs: 20_000 } };
    expect(withCertificateHint('alert bad certificate', early, 5000)).toMatch(/^the client certificate \/x.pem is not valid before 1970-01-01T00:00:10Z; check this node's clock/);
    const valid = { ...expired, cert: { ...expired.cert, notAfterMs: 20_000 } };
    expect(withCertificateHint('alert bad certificate', valid, 5000)).toBe('alert bad certificate');
  });

  it('refuses a client certificate file that holds no certificate, naming it, and reports what it loaded', { timeout: 60_000 }, async () => {
    const c = await certs('fresh', 'node-pem');
    const { url } = await startControlPlane({ tls: { cert: c.serverCert, key: c.serverKey, ca: c.ca } });
    const loaded: unknown[] = [];
    const opts = {
      server: url.replace('http://', 'https://'),
      protocol: 'connect' as const,
      pingIntervalMs: 5000,
      pingTimeoutMs: 5000,
      tls: { cert: c.clientCert, key: c.clientKey, ca: '' },
      systemCaBundles: [c.ca],
      env: {},
      onTlsLoaded: (l: unknown) => loaded.push(l),
    };
    await registerThrough(opts, 'node-pem');
    expect(loaded.at(-1)).toMatchObject({ certPath: c.clientCert, ca: 'system trust store', cert: { subject: 'CN=node-pem' } });
    // A half-written renewal.
    writeFileSync(c.clientCert, '-----BEGIN CERTIFICATE-----\nMIIB\n');
    await expect(registerThrough(opts, 'node-pem')).rejects.toThrow(`tls.cert: ${c.clientCert} is not a PEM certificate`);
  });
});
