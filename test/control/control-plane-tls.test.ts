import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { FakeAgent } from '../helpers/fake-agent.js';
import { makeTestCerts, type TestCerts } from '../helpers/make-test-certs.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

let certs: TestCerts;
beforeAll(async () => {
  certs = await makeTestCerts('node-a');
}, 60_000);
afterAll(() => certs?.cleanup());

async function tlsControlPlane() {
  const started = await startControlPlane({ tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.ca } });
  // The server certificate is for 127.0.0.1 and localhost; either name works.
  return { ...started, url: started.url.replace('127.0.0.1', 'localhost') };
}

function agent(opts: ConstructorParameters<typeof FakeAgent>[0]): FakeAgent {
  const a = new FakeAgent(opts);
  onTestFinished(() => a.kill());
  return a;
}

describe('ControlPlane with mutual TLS', () => {
  it.each(['connect', 'grpc'] as const)('accepts an agent whose client certificate is from its CA (%s)', async (protocol) => {
    const { cp, url } = await tlsControlPlane();
    expect(url).toMatch(/^https:\/\/localhost:\d+$/);
    const a = agent({ baseUrl: url, nodeId: 'node-a', protocol, tls: { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey } });
    const ack = await a.waitFor((m) => m.msg.case === 'ack');
    expect(ack.msg.value).toMatchObject({ ok: true });
    expect(cp.nodes()).toMatchObject([{ id: 'node-a', connected: true }]);
  });

  it('refuses a client certificate from another CA', async () => {
    const { cp, url } = await tlsControlPlane();
    const a = agent({ baseUrl: url, nodeId: 'node-a', tls: { ca: certs.ca, cert: certs.otherClientCert, key: certs.otherClientKey } });
    await expect(a.done).rejects.toThrow(/unauthenticated.*client certificate "node-a" refused/);
    expect(a.received).toEqual([]);
    expect(cp.nodes()).toEqual([]);
  });

  it('refuses an agent without a client certificate', async () => {
    const { cp, url } = await tlsControlPlane();
    const a = agent({ baseUrl: url, nodeId: 'node-a', tls: { ca: certs.ca } });
    await expect(a.done).rejects.toThrow(/unauthenticated.*no client certificate presented/);
    expect(a.received).toEqual([]);
    expect(cp.nodes()).toEqual([]);
  });

  it('refuses a client certificate from another CA over gRPC too', async () => {
    const { cp, url } = await tlsControlPlane();
    const a = agent({ baseUrl: url, nodeId: 'node-a', protocol: 'grpc', tls: { ca: certs.ca, cert: certs.otherClientCert, key: certs.otherClientKey } });
    await expect(a.done).rejects.toThrow(/unauthenticated.*refused/);
    expect(cp.nodes()).toEqual([]);
  });

  it('refuses a plaintext (h2c) agent', async () => {
    const { cp, url } = await tlsControlPlane();
    const a = agent({ baseUrl: url.replace('https://', 'http://'), nodeId: 'node-a' });
    await expect(a.done).rejects.toThrow();
    expect(cp.nodes()).toEqual([]);
  });
});
