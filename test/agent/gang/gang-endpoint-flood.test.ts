import { connect, type Socket } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { askPeer } from '../../../src/agent/gang/ask-peer.js';
import { MAX_CONNECTIONS, PER_SOURCE_CONNECTIONS } from '../../../src/agent/gang/gang-connections.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import { readGangTls } from '../../../src/agent/gang/gang-tls.js';
import { GangWatch } from '../../../src/agent/gang/gang-watch.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { until } from '../../helpers/engine-processes.js';
import { makeLeafCert, makeTestCerts } from '../../helpers/make-test-certs.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { twoRankSpec as spec, twoRankWorker } from '../../helpers/two-rank-gang.js';

/*
 * Security review 4, F1: hosts that hold connections to a gang endpoint without
 * asking anything must not shut the gang's peers out, nor be read by a peer as
 * the node gone. Real sockets on loopback: 127.0.0.0/8 is all this host's, so
 * 127.0.0.2 and 127.0.0.3 are other source addresses (the client binds them).
 */

const worker = twoRankWorker();

type Endpoint = Awaited<ReturnType<typeof serveGangEndpoint>>;

async function endpoint(over: Partial<Parameters<typeof serveGangEndpoint>[0]> = {}): Promise<Endpoint & { host: string; port: number; log: ReturnType<typeof captureLogger> }> {
  const log = captureLogger('info');
  const g = await serveGangEndpoint({ addr: '127.0.0.1:0', nodeId: 'node-1', shards: () => [worker], tls: () => ({ tls: undefined }), log: log.logger, ...over });
  onTestFinished(() => void g.server.close());
  return { ...g, host: '127.0.0.1', port: Number(g.endpoint.split(':')[1]), log };
}

/** `n` idle TCP connections from `localAddress` (nothing sent): a socket the endpoint closes ends destroyed; all destroyed when the test ends. */
function flood(port: number, n: number, localAddress?: string) {
  const sockets: Socket[] = [];
  for (let i = 0; i < n; i++) {
    const s = connect({ host: '127.0.0.1', port, ...(localAddress ? { localAddress } : {}) });
    // A reset by the endpoint is what a refused one sees; the close ends it.
    s.on('error', () => {});
    s.on('end', () => s.destroy());
    sockets.push(s);
  }
  const stop = () => {
    for (const s of sockets) s.destroy();
  };
  onTestFinished(stop);
  return { sockets, stop };
}
const openIn = (f: ReturnType<typeof flood>) => f.sockets.filter((s) => !s.destroyed && s.readyState === 'open').length;

const accepted = (g: Endpoint, n: number) => new Promise<boolean>((resolve) => g.server.getConnections((_e, c) => resolve(c >= n)));

describe('the gang endpoint under a connection flood (security review 4, F1)', () => {
  it('answers a peer from another address while one address holds 1,000 idle connections; that address keeps 8', async () => {
    // The deadline is lengthened so the flood's slots stay taken for the whole test: the cap alone must save the peer.
    const g = await endpoint({ connectionDeadlineMs: 600_000 });
    const f = flood(g.port, 1_000, '127.0.0.2');
    await until(async () => openIn(f) <= PER_SOURCE_CONNECTIONS && (await accepted(g, PER_SOURCE_CONNECTIONS)), 'the endpoint to keep the cap of the flood and close the rest');
    expect(openIn(f)).toBe(PER_SOURCE_CONNECTIONS);
    // A peer from 127.0.0.1 (askPeer binds nothing) is answered, the flood still held.
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000)).toMatchObject({ ok: true, answer: { node: 'node-1' } });
    expect(openIn(f)).toBe(PER_SOURCE_CONNECTIONS);
    expect(g.log.records.some((r) => String(r.msg).startsWith('gang endpoint closed connections past the per-source cap') && r.source === '127.0.0.2')).toBe(true);
  });

  it('closes a connection that sends no request, plaintext or before its TLS handshake, within seconds, not Node\'s 30 s or 120 s', async () => {
    const g = await endpoint();
    const idle = flood(g.port, 1, '127.0.0.3');
    const closed = new Promise<number>((resolve) => {
      const t0 = Date.now();
      idle.sockets[0]?.once('close', () => resolve(Date.now() - t0));
    });
    // Safety net far above the 2 s deadline and far below Node's own bounds (30 s check of headersTimeout).
    await until(async () => idle.sockets[0]?.destroyed === true, 'the idle plaintext connection to be closed by the endpoint', 20_000);
    expect(await closed).toBeLessThan(20_000);

    const certs = await makeTestCerts('node-1');
    onTestFinished(() => certs.cleanup());
    const node = await makeLeafCert(certs, 'node-1-both', 'node-1', 'extendedKeyUsage=serverAuth,clientAuth\n');
    const tls = readGangTls({ cert: node.cert, key: node.key, ca: certs.ca, expiryWarningMs: 0 });
    const t = await endpoint({ tls: () => tls });
    const quiet = flood(t.port, 1, '127.0.0.3');
    await until(async () => quiet.sockets[0]?.destroyed === true, 'the connection that never sends a ClientHello to be closed', 20_000);
  });

  it('a flood from the peer\'s own address: its asks are reset, "unknown", and the gang watch never breaks the gang; answered again after', async () => {
    const g = await endpoint({ connectionDeadlineMs: 600_000 });
    const f = flood(g.port, 1_000);
    await until(async () => openIn(f) <= PER_SOURCE_CONNECTIONS && (await accepted(g, PER_SOURCE_CONNECTIONS)), 'the endpoint to keep the cap of the flood and close the rest');
    const r = await askPeer(g.endpoint, 'g-0-g1', 5_000);
    expect(r).toMatchObject({ ok: false, cause: 'unknown' });
    // Rank 0 on this address watches rank 1 (a worker: no socket of its engine to ask), through the flooded endpoint.
    const leader = shardSnapshot('g-0-g1-r0', { replicaId: 'g-0', spec: spec(0, g.endpoint), pid: 1, servesHttp: true, logPath: '' });
    const marks: unknown[] = [];
    const watchLog = captureLogger('info');
    const w = new GangWatch({ nodeId: 'node-0', shards: () => [leader], mark: (id, fault) => marks.push([id, fault]), log: watchLog.logger, agentGraceMs: 50, timeoutMs: 5_000 });
    for (let round = 0; round < 10; round++) await w.round();
    expect(marks).toEqual([]);
    // It did ask, and said what it saw: a reset, no evidence.
    expect(watchLog.records.map((r) => r.msg)).toContainEqual(expect.stringMatching(/^gang peer rank 1 on node-1: not judged \(agent 127\.0\.0\.1:\d+: .*\): no evidence either way$/));
    f.stop();
    await until(async () => (await askPeer(g.endpoint, 'g-0-g1', 5_000)).ok, 'the peer to be answered once the flood ends');
  });

  it(`keeps the global cap of ${MAX_CONNECTIONS} as a last resort: eight sources at their cap fill it, a ninth is refused ("unknown")`, async () => {
    const g = await endpoint({ connectionDeadlineMs: 600_000 });
    const floods = Array.from({ length: MAX_CONNECTIONS / PER_SOURCE_CONNECTIONS }, (_, i) => flood(g.port, PER_SOURCE_CONNECTIONS, `127.0.0.${10 + i}`));
    await until(async () => floods.every((f) => openIn(f) === PER_SOURCE_CONNECTIONS) && (await accepted(g, MAX_CONNECTIONS)), 'every source to fill its cap');
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000)).toMatchObject({ ok: false, cause: 'unknown' });
    floods[0]?.stop();
    await until(async () => (await askPeer(g.endpoint, 'g-0-g1', 5_000)).ok, 'a slot to be free again');
  });
});
