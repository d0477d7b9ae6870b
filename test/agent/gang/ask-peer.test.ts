import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { askPeer, probeHealth, probePort } from '../../../src/agent/gang/ask-peer.js';
import { freePort } from '../../helpers/engine-processes.js';

/*
 * What a failed ask says of the peer (issue 47 item 2), on real sockets:
 * refused (nothing listens: an agent restarting), silent (nothing answers in
 * time: a frozen node), unknown (a process accepted and reset: a full
 * connection cap, never a death).
 */

async function listening(server: Server | ReturnType<typeof createHttpServer>): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  onTestFinished(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

describe('a failed ask of a peer', () => {
  it('is refused where nothing listens', async () => {
    const port = await freePort();
    expect(await askPeer(`127.0.0.1:${port}`, 'g', 2_000)).toEqual({ ok: false, cause: 'refused', why: `agent 127.0.0.1:${port}: connect ECONNREFUSED` });
    expect(await probePort('127.0.0.1', port, 2_000)).toEqual({ ok: false, cause: 'refused', why: 'connect ECONNREFUSED' });
    expect(await probeHealth('127.0.0.1', port, 2_000)).toMatchObject({ ok: false, cause: 'refused' });
  });

  it('is silent where a process accepts and never answers (a frozen agent)', async () => {
    const port = await listening(createServer(() => {}));
    expect(await askPeer(`127.0.0.1:${port}`, 'g', 300)).toEqual({ ok: false, cause: 'silent', why: `agent 127.0.0.1:${port}: no answer within 300 ms` });
    expect(await probeHealth('127.0.0.1', port, 300)).toMatchObject({ ok: false, cause: 'silent' });
  });

  it('is unknown, not a death, where a process accepts and resets (a connection cap full)', async () => {
    const port = await listening(createServer((s) => s.resetAndDestroy()));
    const r = await askPeer(`127.0.0.1:${port}`, 'g', 2_000);
    expect(r).toMatchObject({ ok: false, cause: 'unknown' });
  });

  it("reads a vLLM API's /health: 200 alive, 503 its engine dead (a refusal of a bound socket), another status unknown", async () => {
    let status = 200;
    const port = await listening(createHttpServer((req, res) => res.writeHead(req.url === '/health' ? status : 404).end()));
    expect(await probeHealth('127.0.0.1', port, 2_000)).toEqual({ ok: true });
    status = 503;
    expect(await probeHealth('127.0.0.1', port, 2_000)).toEqual({ ok: false, accepted: true, cause: 'refused', why: 'answered HTTP 503' });
    status = 500;
    expect(await probeHealth('127.0.0.1', port, 2_000)).toMatchObject({ ok: false, accepted: true, cause: 'unknown' });
  });
});
