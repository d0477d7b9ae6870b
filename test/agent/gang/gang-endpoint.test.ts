import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { askPeer } from '../../../src/agent/gang/ask-peer.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import { readGangTls } from '../../../src/agent/gang/gang-tls.js';
import { GangMemberSchema, GangSchema, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { gangProblems } from '../../../src/lib/gang-problems.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { makeLeafCert, makeTestCerts } from '../../helpers/make-test-certs.js';

const members = [0, 1].map((rank) => create(GangMemberSchema, { rank, nodeId: `node-${rank}`, shardId: `g-0-g1-r${rank}`, agentEndpoint: `10.0.0.${rank + 1}:7471` }));
const spec = (over: Record<string, unknown> = {}) => create(StartShardSchema, { shardId: 'g-0-g1-r1', rank: 1, nnodes: 2, gang: create(GangSchema, { gangId: 'g-0-g1', members }), ...over });

const leader = shardSnapshot('g-0-g1-r0', { replicaId: 'g-0', spec: spec({ shardId: 'g-0-g1-r0', rank: 0 }), pid: 1, logPath: '' });

describe('the gang contract (StartShard.gang)', () => {
  it('accepts a gang that lists every rank in order with this shard at its own rank', () => {
    expect(gangProblems(spec())).toEqual([]);
    expect(gangProblems(spec({ gang: undefined }))).toEqual([]);
  });

  it.each([
    ['a gang on one node', { nnodes: 1, rank: 0 }, 'gang is set on a shard of nnodes 1'],
    ['an id that would name a file', { gang: create(GangSchema, { gangId: '../x', members }) }, 'gang.gang_id is not'],
    ['a rank missing', { gang: create(GangSchema, { gangId: 'g', members: [members[0]!] }) }, 'gang.members lists 1 ranks; a shard of nnodes 2 needs exactly 2'],
    ['ranks out of order', { gang: create(GangSchema, { gangId: 'g', members: [members[1]!, members[0]!] }) }, 'gang.members[0].rank is 1'],
    ['another shard at this rank', { shardId: 'someone-else' }, 'gang.members names g-0-g1-r1 at rank 1, not this shard someone-else'],
    ['an endpoint that is not host:port', { gang: create(GangSchema, { gangId: 'g', members: [members[0]!, { ...members[1]!, agentEndpoint: 'http://x:1/..' }] }) }, 'gang.members[1].agent_endpoint is not host:port'],
    ['an unprintable node id', { gang: create(GangSchema, { gangId: 'g', members: [members[0]!, { ...members[1]!, nodeId: 'a\u001b[2J' }] }) }, 'gang.members[1].node_id must be'],
    ['an http_port out of range', { gang: create(GangSchema, { gangId: 'g', members: [{ ...members[0]!, httpPort: 70000 }, members[1]!] }) }, 'gang.members[0].http_port is 70000'],
  ])('refuses %s, naming the field', (_what, over, message) => {
    expect(gangProblems(spec(over))[0]?.message).toContain(message);
  });
});

describe('the gang endpoint', () => {
  it('answers its ranks of a gang in plaintext when the agent has no TLS, and nothing for another gang', async () => {
    const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-0', shards: () => [leader], tls: () => ({ tls: undefined }), log: captureLogger('info').logger });
    onTestFinished(() => void g.server.close());
    const r = await askPeer(g.endpoint, 'g-0-g1', 5_000);
    expect(r).toEqual({ ok: true, answer: { node: 'node-0', ranks: [{ rank: 0, shard: 'g-0-g1-r0', state: 'READY', running: true, stalled: false, error: '' }] } });
    expect(await askPeer(g.endpoint, 'other', 5_000)).toEqual({ ok: true, answer: { node: 'node-0', ranks: [] } });
  });

  it('speaks mutual TLS with the agent\'s certificate and CA: a peer of the fleet is answered, one without a certificate of its CA is not', async () => {
    const certs = await makeTestCerts('node-0');
    onTestFinished(() => certs.cleanup());
    // A node certificate good for both ends of a TLS connection, as the gang endpoint needs (security review 4, F6).
    const node = await makeLeafCert(certs, 'node-0', 'node-0', 'extendedKeyUsage=serverAuth,clientAuth\n');
    const tls = readGangTls({ cert: node.cert, key: node.key, ca: certs.ca, expiryWarningMs: 0 });
    if (!('tls' in tls) || !tls.tls) throw new Error('TLS files unreadable');
    const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-0', shards: () => [leader], tls: () => tls, log: captureLogger('info').logger });
    onTestFinished(() => void g.server.close());
    const peer = readGangTls({ cert: certs.clientCert, key: certs.clientKey, ca: certs.ca, expiryWarningMs: 0 });
    if (!('tls' in peer) || !peer.tls) throw new Error('TLS files unreadable');
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, peer.tls)).toMatchObject({ ok: true, answer: { node: 'node-0' } });
    const stranger = readGangTls({ cert: certs.otherClientCert, key: certs.otherClientKey, ca: certs.ca, expiryWarningMs: 0 });
    if (!('tls' in stranger) || !stranger.tls) throw new Error('TLS files unreadable');
    expect((await askPeer(g.endpoint, 'g-0-g1', 5_000, stranger.tls)).ok).toBe(false);
    // Plaintext to a TLS endpoint: nothing.
    expect((await askPeer(g.endpoint, 'g-0-g1', 5_000)).ok).toBe(false);
    // TLS configured without a CA: an error, never plaintext.
    expect(readGangTls({ cert: certs.clientCert, key: certs.clientKey, ca: '', expiryWarningMs: 0 })).toEqual({ error: 'tls.ca is not set; the gang endpoint speaks mutual TLS only' });
  });
});
