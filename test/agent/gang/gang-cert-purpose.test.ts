import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { askPeer } from '../../../src/agent/gang/ask-peer.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import { readGangTls } from '../../../src/agent/gang/gang-tls.js';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { gangCertProblem } from '../../../src/lib/gang-cert-purpose.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { makeLeafCert, makeTestCerts, type TestCerts } from '../../helpers/make-test-certs.js';
import { runCli } from '../../helpers/run-cli.js';

/*
 * Security review 4, F6: the gang endpoint serves the agent's certificate as a
 * TLS server certificate and asks its peers with it as a client one. One
 * without serverAuth (a client-only node certificate, the common kind) is
 * refused at start, exit 78, one line naming the file; never found out by a
 * gang fenced 10 s after READY. Certificates made by openssl, signed by one CA.
 */

let certs: TestCerts;
const leaf: Record<'clientOnly' | 'serverOnly' | 'both' | 'none' | 'any', { cert: string; key: string }> = {} as never;
beforeAll(async () => {
  certs = await makeTestCerts('node-a');
  leaf.clientOnly = await makeLeafCert(certs, 'client-only', 'node-a', 'extendedKeyUsage=clientAuth\n');
  leaf.serverOnly = await makeLeafCert(certs, 'server-only', 'node-a', 'extendedKeyUsage=serverAuth\n');
  leaf.both = await makeLeafCert(certs, 'both', 'node-a', 'extendedKeyUsage=serverAuth,clientAuth\n');
  leaf.none = await makeLeafCert(certs, 'no-eku', 'node-a', '');
  leaf.any = await makeLeafCert(certs, 'any-eku', 'node-a', 'extendedKeyUsage=anyExtendedKeyUsage\n');
}, 60_000);
afterAll(() => certs?.cleanup());

const yaml = (cert: { cert: string; key: string }, gang = 'gang_addr: 127.0.0.1:0\n') =>
  `node_id: node-a\nserver: https://127.0.0.1:8443\n${gang}tls:\n  cert: ${cert.cert}\n  key: ${cert.key}\n  ca: ${certs.ca}\n`;
let n = 0;
function configFile(text: string): string {
  const p = join(certs.dir, `agent-${n++}.yaml`);
  writeFileSync(p, text);
  return p;
}
function loadError(text: string): LlmgwError | undefined {
  try {
    loadAgentConfig({ configPath: configFile(text), env: {} });
  } catch (err) {
    if (err instanceof LlmgwError) return err;
    throw err;
  }
  return undefined;
}

describe("the gang endpoint's certificate, checked at start for what it serves (security review 4, F6)", () => {
  it('names what a certificate lacks: a client-only one, a server-only one, and anyExtendedKeyUsage alone (OpenSSL refuses it for a server)', () => {
    expect(gangCertProblem(readFileSync(leaf.clientOnly.cert), leaf.clientOnly.cert)).toBe(
      `tls.cert ${leaf.clientOnly.cert} has extendedKeyUsage clientAuth, without serverAuth: the gang endpoint (gang_addr) serves it to its peers as a TLS server certificate and asks them with it as a client one; issue this node's certificate with extendedKeyUsage serverAuth and clientAuth (or none), or unset gang_addr`,
    );
    expect(gangCertProblem(readFileSync(leaf.serverOnly.cert), 'x.pem')).toContain('without clientAuth');
    expect(gangCertProblem(readFileSync(leaf.any.cert), 'x.pem')).toContain('without serverAuth and clientAuth');
  });

  it('accepts serverAuth with clientAuth, and a certificate with no extendedKeyUsage (any purpose)', () => {
    expect(gangCertProblem(readFileSync(leaf.both.cert), 'x.pem')).toBeUndefined();
    expect(gangCertProblem(readFileSync(leaf.none.cert), 'x.pem')).toBeUndefined();
  });

  it('refuses the configuration (exit 78) with gang_addr and a client-only certificate; the same certificate without gang_addr is fine', () => {
    const err = loadError(yaml(leaf.clientOnly));
    expect(err?.exitCode).toBe(78);
    expect(err?.message).toMatch(new RegExp(`^tls\\.cert ${leaf.clientOnly.cert.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} has extendedKeyUsage clientAuth, without serverAuth: .*\\(.*gang_addr.*\\)$`));
    expect(loadError(yaml(leaf.clientOnly, ''))).toBeUndefined();
    expect(loadError(yaml(leaf.both))).toBeUndefined();
    expect(loadError(yaml(leaf.none))).toBeUndefined();
  });

  it('`llmgw agent run` with it stops before anything, exit 78, one line naming the file', async () => {
    // Its own folders and a short timeout: an agent that does start (the bug) writes nothing of the host's and is killed.
    const own = `admin:\n  socket: ${join(certs.dir, 'agent.sock')}\nsupervisor:\n  state_dir: ${join(certs.dir, 'state')}\n  log_dir: ${join(certs.dir, 'log')}\n`;
    const config = configFile(yaml(leaf.clientOnly) + own);
    const r = await runCli(['agent', 'run', '--config', config], { env: { LLMGW_NODE_ID: undefined, LLMGW_SERVER: undefined, LLMGW_ADMIN_SOCKET: undefined, LLMGW_SOCKET: undefined }, timeout: 15_000 });
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toMatch(/^error: tls\.cert \S+client-only\.pem has extendedKeyUsage clientAuth, without serverAuth: .+\n?$/);
  });

  it('a certificate with both purposes serves a peer of the fleet; one renewed client-only is not served (the peers would refuse it)', async () => {
    for (const [cert, served] of [
      [leaf.both, true],
      [leaf.none, true],
      [leaf.clientOnly, false],
    ] as const) {
      const log = captureLogger('info');
      const tls = readGangTls({ cert: cert.cert, key: cert.key, ca: certs.ca, expiryWarningMs: 0 });
      const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-a', shards: () => [], tls: () => tls, log: log.logger });
      onTestFinished(() => void g.server.close());
      const peer = readGangTls({ cert: certs.clientCert, key: certs.clientKey, ca: certs.ca, expiryWarningMs: 0 });
      if (!('tls' in peer) || !peer.tls) throw new Error('TLS files unreadable');
      const r = await askPeer(g.endpoint, 'g-0-g1', 5_000, peer.tls);
      expect(r.ok).toBe(served);
      if (!served) {
        expect(r).toMatchObject({ cause: 'unknown' });
        expect(log.records.find((x) => x.msg === 'gang endpoint refuses every peer until the TLS files can be read')?.err).toContain('without serverAuth');
      }
    }
  });
});
