import { X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { askPeer } from '../../../src/agent/gang/ask-peer.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import { type GangTls, readGangTls } from '../../../src/agent/gang/gang-tls.js';
import { GangWatch } from '../../../src/agent/gang/gang-watch.js';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { certNamesNode, peerNameProblem } from '../../../src/lib/cert-names-node.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { makeLeafCert, makeTestCerts, type TestCerts } from '../../helpers/make-test-certs.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { twoRankSpec as spec } from '../../helpers/two-rank-gang.js';

/*
 * Security review 4, F5 and issue 48 item 3: a gang peer is authenticated as
 * the node it claims. Any certificate of the fleet's CA used to answer for
 * any member; now the member's node id must be in it (tls.peer_name), both
 * ways: the asker checks the endpoint's, the endpoint checks the asker's.
 * A certificate of another node is refused, and a refusal is never read as
 * the member's death. Real certificates made by openssl, one CA; real TLS
 * on loopback.
 */

const BOTH = 'extendedKeyUsage=serverAuth,clientAuth\n';
let certs: TestCerts;
const leaf: Record<'node0' | 'node1' | 'cnOnly' | 'impostor' | 'spiffe1' | 'wildcard' | 'fqdn0', { cert: string; key: string }> = {} as never;
beforeAll(async () => {
  certs = await makeTestCerts('node-0');
  leaf.node0 = await makeLeafCert(certs, 'node-0', 'node-0', `subjectAltName=DNS:node-0\n${BOTH}`);
  leaf.node1 = await makeLeafCert(certs, 'node-1', 'node-1', `subjectAltName=DNS:node-1\n${BOTH}`);
  // The project's own PKI shape: a CN and no subjectAltName.
  leaf.cnOnly = await makeLeafCert(certs, 'cn-only-1', 'node-1', BOTH);
  // Another node of the same fleet (same CA): its certificate is valid, for node-x.
  leaf.impostor = await makeLeafCert(certs, 'node-x', 'node-x', `subjectAltName=DNS:node-x\n${BOTH}`);
  leaf.spiffe1 = await makeLeafCert(certs, 'spiffe-1', 'whatever', `subjectAltName=URI:spiffe://fleet.example/node/node-1\n${BOTH}`);
  leaf.wildcard = await makeLeafCert(certs, 'wildcard', 'node-1', `subjectAltName=DNS:*.gpu.example.com\n${BOTH}`);
  leaf.fqdn0 = await makeLeafCert(certs, 'fqdn-0', 'node-0', `subjectAltName=DNS:node-0.gpu.example.com\n${BOTH}`);
}, 60_000);
afterAll(() => certs?.cleanup());

const x509 = (f: { cert: string }) => new X509Certificate(readFileSync(f.cert));
function tlsOf(f: { cert: string; key: string }, peerName?: string): GangTls {
  const r = readGangTls({ cert: f.cert, key: f.key, ca: certs.ca, expiryWarningMs: 0, ...(peerName ? { peerName } : {}) });
  if (!('tls' in r) || !r.tls) throw new Error('TLS files unreadable');
  return r.tls;
}


/** An endpoint for node `nodeId` with `tls`, running rank 1 of the gang in `state`. */
async function endpoint(nodeId: string, tls: GangTls, state = ShardState.READY) {
  const log = captureLogger('info');
  const worker = shardSnapshot('g-0-g1-r1', { replicaId: 'g-0', spec: spec(1), pid: 1, logPath: '', state });
  const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId, shards: () => [worker], tls: () => ({ tls }), log: log.logger });
  onTestFinished(() => void g.server.close());
  return { ...g, log };
}

describe('which certificate names which node (tls.peer_name)', () => {
  it('a DNS subjectAltName, or the CN of a certificate without one; never another node, never a wildcard', () => {
    expect(certNamesNode(x509(leaf.node1), 'node-1')).toBe(true);
    expect(certNamesNode(x509(leaf.node1), 'NODE-1')).toBe(true);
    expect(certNamesNode(x509(leaf.cnOnly), 'node-1')).toBe(true);
    expect(certNamesNode(x509(leaf.node1), 'node-0')).toBe(false);
    expect(certNamesNode(x509(leaf.impostor), 'node-1')).toBe(false);
    expect(certNamesNode(x509(leaf.wildcard), 'node-1')).toBe(false);
    // A DNS name present: the CN no longer counts (RFC 6125), and CN=node-1 beside DNS:*.gpu… names nothing.
    expect(certNamesNode(x509(leaf.wildcard), 'node-1.gpu.example.com')).toBe(false);
  });

  it('a pattern: {node_id}.gpu.example.com, or a URI subjectAltName such as SPIFFE\'s, matched exactly', () => {
    expect(certNamesNode(x509(leaf.fqdn0), 'node-0', '{node_id}.gpu.example.com')).toBe(true);
    expect(certNamesNode(x509(leaf.fqdn0), 'node-0')).toBe(false);
    const spiffe = 'spiffe://fleet.example/node/{node_id}';
    expect(certNamesNode(x509(leaf.spiffe1), 'node-1', spiffe)).toBe(true);
    expect(certNamesNode(x509(leaf.spiffe1), 'node-1x', spiffe)).toBe(false);
    expect(certNamesNode(x509(leaf.node1), 'node-1', spiffe)).toBe(false);
    // The CN of a URI-only certificate is not a URI.
    expect(certNamesNode(x509(leaf.spiffe1), 'whatever', spiffe)).toBe(false);
  });

  it.each([
    ['no placeholder', 'node-1', 'exactly once'],
    ['two placeholders', '{node_id}.{node_id}', 'exactly once'],
    ['a wildcard', '*.{node_id}', 'without spaces or wildcards'],
    ['a space', '{node_id} x', 'without spaces or wildcards'],
  ])('refuses a tls.peer_name with %s', (_what, name, message) => {
    expect(peerNameProblem(name)).toContain(message);
  });
  it.each(['{node_id}', '{node_id}.gpu.example.com', 'spiffe://fleet.example/node/{node_id}'])('accepts tls.peer_name %s', (name) => {
    expect(peerNameProblem(name)).toBeUndefined();
  });
});

describe('the gang endpoint and its askers bind the certificate to the member (issue 48 item 3)', () => {
  it('node-0 asks node-1: answered, with certificates naming each by DNS name or by CN alone', async () => {
    const g = await endpoint('node-1', tlsOf(leaf.node1));
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.node0), 'node-1')).toMatchObject({ ok: true, answer: { node: 'node-1' } });
    const cn = await endpoint('node-1', tlsOf(leaf.cnOnly));
    expect(await askPeer(cn.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.node0), 'node-1')).toMatchObject({ ok: true, answer: { node: 'node-1' } });
  });

  it("an endpoint with another node's valid certificate answering rank 1 FAILED: refused by the asker, 'unknown', and the watch never breaks the gang", async () => {
    // node-x holds node-1's address (a squat during node-1's restart, or a misrouted endpoint) and forges rank 1 FAILED.
    const forger = await endpoint('node-x', tlsOf(leaf.impostor), ShardState.FAILED);
    const r = await askPeer(forger.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.node0), 'node-1');
    expect(r).toMatchObject({ ok: false, cause: 'unknown' });
    expect(r.ok ? '' : r.why).toContain('its certificate names DNS:node-x, not node node-1');
    // Rank 0's agent watches rank 1 (a worker: no engine socket to ask) through the forger.
    const leader = shardSnapshot('g-0-g1-r0', { replicaId: 'g-0', spec: spec(0, forger.endpoint), pid: 1, servesHttp: true, logPath: '' });
    const marks: unknown[] = [];
    const log = captureLogger('info');
    const w = new GangWatch({ nodeId: 'node-0', shards: () => [leader], mark: (id, f) => marks.push([id, f]), log: log.logger, tls: () => ({ tls: tlsOf(leaf.node0) }), agentGraceMs: 1, timeoutMs: 5_000 });
    for (let round = 0; round < 5; round++) await w.round();
    expect(marks).toEqual([]);
    expect(log.records.map((x) => x.msg)).toContainEqual(expect.stringContaining('gang peer rank 1 on node-1: not judged (agent 127.0.0.1:'));
    expect(log.records.map((x) => x.msg)).toContainEqual(expect.stringContaining('not node node-1'));
  });

  it('an answer that says it is another node is no evidence (plaintext on loopback has no certificate); the same answer asked of node-x is', async () => {
    const log = captureLogger('info');
    const worker = shardSnapshot('g-0-g1-r1', { replicaId: 'g-0', spec: spec(1), pid: 1, logPath: '', state: ShardState.FAILED });
    const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-x', shards: () => [worker], tls: () => ({ tls: undefined }), log: log.logger });
    onTestFinished(() => void g.server.close());
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, undefined, 'node-1')).toEqual({
      ok: false,
      cause: 'unknown',
      why: `agent ${g.endpoint} says it is node node-x, not node-1: not this member's agent, its answer is no evidence`,
    });
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, undefined, 'node-x')).toMatchObject({ ok: true, answer: { node: 'node-x', ranks: [{ state: 'FAILED' }] } });
  });

  it('the endpoint refuses an asker whose certificate names no member of that gang (HTTP 403, "unknown"), and says so once', async () => {
    const g = await endpoint('node-1', tlsOf(leaf.node1));
    const r = await askPeer(g.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.impostor), 'node-1');
    expect(r).toEqual({ ok: false, cause: 'unknown', why: `agent ${g.endpoint} answered HTTP 403 (Certificate names no member of this gang)` });
    await askPeer(g.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.impostor), 'node-1');
    const lines = g.log.records.filter((x) => String(x.msg).startsWith('gang endpoint refused a peer whose certificate names no member'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ gang: 'g-0-g1', names: 'DNS:node-x' });
    // A gang this node runs no rank of: answered to any certificate of the fleet, with no ranks ("not supervised here").
    expect(await askPeer(g.endpoint, 'another-gang', 5_000, tlsOf(leaf.impostor), 'node-1')).toEqual({ ok: true, answer: { node: 'node-1', ranks: [] } });
    // A member asking is answered.
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.node0), 'node-1')).toMatchObject({ ok: true });
  });

  it('an endpoint whose own certificate names another node serves nothing (every handshake fails) and says why', async () => {
    const log = captureLogger('info');
    const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-1', shards: () => [], tls: () => ({ tls: tlsOf(leaf.impostor) }), log: log.logger });
    onTestFinished(() => void g.server.close());
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, tlsOf(leaf.node0), 'node-1')).toMatchObject({ ok: false, cause: 'unknown' });
    expect(log.records).toContainEqual(expect.objectContaining({ err: expect.stringContaining('names DNS:node-x, not node node-1') }));
  });
});

describe("this node's own certificate, checked at start against node_id (exit 78, one line)", () => {
  let n = 0;
  function loadError(cert: { cert: string; key: string }, extra = ''): LlmgwError | undefined {
    const p = join(certs.dir, `agent-id-${n++}.yaml`);
    writeFileSync(p, `node_id: node-1\nserver: https://127.0.0.1:8443\ngang_addr: 127.0.0.1:0\ntls:\n  cert: ${cert.cert}\n  key: ${cert.key}\n  ca: ${certs.ca}\n${extra}`);
    try {
      loadAgentConfig({ configPath: p, env: {} });
    } catch (err) {
      if (err instanceof LlmgwError) return err;
      throw err;
    }
    return undefined;
  }

  it("refuses a certificate that names another node, naming the file, the names and tls.peer_name", () => {
    const err = loadError(leaf.impostor);
    expect(err?.exitCode).toBe(78);
    expect(err?.message).toContain(`tls.cert ${leaf.impostor.cert} names DNS:node-x, not node node-1 by tls.peer_name "{node_id}"`);
    expect(err?.message.split('\n')).toHaveLength(1);
  });

  it('accepts one naming it by DNS name, by CN alone, or by the configured pattern; refuses a bad pattern by its key', () => {
    expect(loadError(leaf.node1)).toBeUndefined();
    expect(loadError(leaf.cnOnly)).toBeUndefined();
    expect(loadError(leaf.spiffe1, '  peer_name: spiffe://fleet.example/node/{node_id}\n')).toBeUndefined();
    expect(loadError(leaf.spiffe1)?.message).toContain('names URI:spiffe://fleet.example/node/node-1, not node node-1');
    const bad = loadError(leaf.node1, '  peer_name: "*.x"\n');
    expect(bad?.exitCode).toBe(78);
    expect(bad?.message).toContain('tls.peer_name "*.x" must hold {node_id} exactly once');
  });
});
