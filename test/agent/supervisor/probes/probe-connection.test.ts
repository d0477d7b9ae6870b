import { Agent } from 'node:http';
import { type AddressInfo, type Server, type Socket, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type HealthVerdict, UNHEALTHY_AFTER_FAILURES, watchHealth } from '../../../../src/agent/supervisor/probes/health-watch.js';
import { httpGet, probeHealth } from '../../../../src/agent/supervisor/probes/http-probe.js';
import { portOwnerCheck } from '../../../../src/agent/supervisor/probes/port-owner-check.js';
import { TickConnection } from '../../../../src/agent/supervisor/probes/tick-connection.js';
import { until } from '../../../helpers/engine-processes.js';

/**
 * The health watch reads /metrics on the connection its /health was just
 * answered on (health-watch.ts, one connection a tick). These are the
 * look-alikes that reuse could confuse: a kept connection the engine closed
 * is not a dead engine, a busy engine's late answer is still an answer, and
 * a connection to an engine replaced on its port is never asked again.
 */

/** What the engine does with one request: which connection (1-based, in accept order), which request on it (1-based), its path. */
type Act = { status: number; body?: string; delayMs?: number } | 'reset' | 'garbage' | 'silent';
type Plan = (conn: number, nth: number, path: string) => Act;

const servers: Server[] = [];
const sockets: Socket[] = [];
const aborts: AbortController[] = [];
const agents: Agent[] = [];
afterEach(async () => {
  for (const a of aborts.splice(0)) a.abort();
  for (const a of agents.splice(0)) a.destroy();
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/**
 * A plain-TCP HTTP/1.1 engine, so a test decides exactly when a kept-alive
 * connection ends (Node's http.Server closes idle ones on close()).
 * `requests` records every request as [connection, nth, path].
 */
async function engine(plan: Plan, port = 0) {
  const requests: [number, number, string][] = [];
  let connections = 0;
  const server = createServer((socket) => {
    sockets.push(socket);
    const conn = ++connections;
    let nth = 0;
    let buffered = '';
    socket.on('error', () => undefined);
    socket.on('data', (d) => {
      buffered += d.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const head = buffered.slice(0, end);
        buffered = buffered.slice(end + 4);
        const path = head.split(' ')[1] ?? '';
        nth++;
        requests.push([conn, nth, path]);
        const act = plan(conn, nth, path);
        if (act === 'silent') continue;
        if (act === 'reset') {
          socket.resetAndDestroy();
          return;
        }
        if (act === 'garbage') {
          socket.write('this is not http\r\n\r\n');
          continue;
        }
        const body = act.body ?? '';
        const answer = () => socket.write(`HTTP/1.1 ${act.status} X\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: keep-alive\r\n\r\n${body}`);
        if (act.delayMs) setTimeout(answer, act.delayMs);
        else answer();
      }
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { server, requests, connections: () => connections, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const METRICS = 'vllm:num_requests_running{model_name="m"} 0\nvllm:generation_tokens_total{model_name="m"} 7\n';

function keepAlive(): Agent {
  const a = new Agent({ keepAlive: true, maxSockets: 1 });
  agents.push(a);
  return a;
}

describe('httpGet on a kept-alive connection', () => {
  it('sends a GET once more on a fresh connection when the engine closed the kept one, and takes that answer', async () => {
    // The second request on connection 1 finds it closed (an RST, as a FIN read after the write gives).
    const e = await engine((conn, nth, path) => (conn === 1 && nth === 2 ? 'reset' : { status: 200, body: path === '/metrics' ? METRICS : '' }));
    const agent = keepAlive();
    expect((await httpGet(`${e.baseUrl}/health`, { timeoutMs: 5000, agent })).status).toBe(200);
    const r = await httpGet(`${e.baseUrl}/metrics`, { timeoutMs: 5000, agent });
    expect(r).toEqual({ status: 200, body: METRICS });
    expect(e.requests).toEqual([
      [1, 1, '/health'],
      [1, 2, '/metrics'],
      [2, 1, '/metrics'],
    ]);
  });

  it('is a failure when the fresh connection is reset too: one retry, never more', async () => {
    const e = await engine((conn, nth) => (conn === 1 && nth === 1 ? { status: 200 } : 'reset'));
    const agent = keepAlive();
    await httpGet(`${e.baseUrl}/health`, { timeoutMs: 5000, agent });
    await expect(httpGet(`${e.baseUrl}/metrics`, { timeoutMs: 5000, agent })).rejects.toMatchObject({ code: 'ECONNRESET' });
    expect(e.connections()).toBe(2);
  });

  it('is a failure, not retried, when a fresh connection is reset: an engine that resets every connection is not healthy', async () => {
    const e = await engine(() => 'reset');
    const r = await probeHealth(e.baseUrl, { timeoutMs: 5000, agent: keepAlive() });
    expect(r).toMatchObject({ ok: false, loading: false, reason: 'GET /health: ECONNRESET' });
    expect(e.connections()).toBe(1);
  });

  it('takes a busy engine\'s late answer within the limit on the kept connection as its answer, without a second request', async () => {
    const e = await engine((_conn, nth) => (nth === 2 ? { status: 200, body: METRICS, delayMs: 400 } : { status: 200 }));
    const agent = keepAlive();
    await httpGet(`${e.baseUrl}/health`, { timeoutMs: 5000, agent });
    expect(await httpGet(`${e.baseUrl}/metrics`, { timeoutMs: 5000, agent })).toEqual({ status: 200, body: METRICS });
    expect(e.requests).toEqual([
      [1, 1, '/health'],
      [1, 2, '/metrics'],
    ]);
  });

  it('gives up at the limit on a kept connection that never answers, with no retry', async () => {
    const e = await engine((_conn, nth) => (nth === 2 ? 'silent' : { status: 200 }));
    const agent = keepAlive();
    await httpGet(`${e.baseUrl}/health`, { timeoutMs: 5000, agent });
    await expect(httpGet(`${e.baseUrl}/metrics`, { timeoutMs: 300, agent })).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(e.connections()).toBe(1);
  });

  it('judges garbage on a kept connection as the engine\'s bad answer, not a closed connection to retry', async () => {
    const e = await engine((_conn, nth) => (nth === 2 ? 'garbage' : { status: 200 }));
    const agent = keepAlive();
    expect((await probeHealth(e.baseUrl, { timeoutMs: 5000, agent })).ok).toBe(true);
    const r = await probeHealth(e.baseUrl, { timeoutMs: 5000, agent });
    expect(r).toMatchObject({ ok: false, loading: false, reason: expect.stringMatching(/^GET \/health: HPE_/) });
    expect(e.connections()).toBe(1);
  });
});

/** This process is the engine: its own listener is the one on the port (port-owner-check.ts judges by the leader's fds). */
const ownPort = (baseUrl: string) => {
  const port = Number(new URL(baseUrl).port);
  return portOwnerCheck({ port, pid: process.pid, pgid: process.pid });
};

describe('the port-owner check\'s connection', () => {
  it('is handed over open with an engine verdict, carries the GETs of the tick, and is closed by its end', async () => {
    const e = await engine((_conn, _nth, path) => ({ status: 200, body: path === '/metrics' ? METRICS : '' }));
    const owner = await ownPort(e.baseUrl)({ keepConnection: true });
    expect(owner.owner).toBe('engine');
    const socket = owner.owner === 'engine' ? owner.connection : undefined;
    expect(socket?.destroyed).toBe(false);
    const tick = new TickConnection();
    agents.push(tick);
    tick.handOver(socket as NonNullable<typeof socket>);
    expect((await httpGet(`${e.baseUrl}/health`, { timeoutMs: 5000, agent: tick })).status).toBe(200);
    expect((await httpGet(`${e.baseUrl}/metrics`, { timeoutMs: 5000, agent: tick })).body).toBe(METRICS);
    expect(e.requests).toEqual([
      [1, 1, '/health'],
      [1, 2, '/metrics'],
    ]);
    tick.end();
    await until(() => socket?.destroyed === true, 'the tick\'s connection closed');
  });

  it('is closed, never handed over, when the caller did not ask for it or the verdict is not the engine', async () => {
    const e = await engine(() => ({ status: 200 }));
    expect(await ownPort(e.baseUrl)()).toEqual({ owner: 'engine' });
    // Someone else's port (pid 1 is never the test's listener): a squatter's connection is not kept.
    const port = Number(new URL(e.baseUrl).port);
    const other = await portOwnerCheck({ port, pid: 1, pgid: 1 })({ keepConnection: true });
    expect(other.owner).toBe('other');
    expect('connection' in other).toBe(false);
    await until(() => sockets.filter((s) => !s.destroyed && !s.readableEnded).length === 0, 'every check connection closed by the agent');
    expect(e.requests).toEqual([]);
  });

  it('sends /health once more on a fresh connection when the engine closed the handed one first, and takes that answer', async () => {
    const e = await engine((conn) => (conn === 1 ? 'reset' : { status: 200 }));
    const owner = await ownPort(e.baseUrl)({ keepConnection: true });
    const tick = new TickConnection();
    agents.push(tick);
    if (owner.owner === 'engine' && owner.connection) tick.handOver(owner.connection);
    expect(await probeHealth(e.baseUrl, { timeoutMs: 5000, agent: tick })).toEqual({ ok: true });
    expect(e.requests).toEqual([
      [1, 1, '/health'],
      [2, 1, '/health'],
    ]);
  });
});

function watch(baseUrl: string, owned = false) {
  const ac = new AbortController();
  aborts.push(ac);
  const verdicts: HealthVerdict[] = [];
  watchHealth({
    baseUrl,
    portOwner: owned ? ownPort(baseUrl) : undefined,
    intervalMs: 100,
    signal: ac.signal,
    stall: { runningGauges: ['vllm:num_requests_running'], progressCounters: ['vllm:generation_tokens_total'], stallTimeoutMs: 60_000 },
    onVerdict: (v) => verdicts.push(v),
  });
  return { verdicts, last: () => verdicts.at(-1) };
}

describe('watchHealth connections', () => {
  it.each([false, true])('asks /health on a fresh connection every tick and /metrics on the one /health was answered on (port-owner check: %s)', async (owned) => {
    const e = await engine((_conn, _nth, path) => ({ status: 200, body: path === '/metrics' ? METRICS : '' }));
    const w = watch(e.baseUrl, owned);
    await until(() => w.verdicts.length >= 4, 'four verdicts');
    const ticks = e.requests.filter(([, , path]) => path === '/health');
    // Every /health opened its own connection; every /metrics came second on it.
    expect(ticks.every(([, nth]) => nth === 1)).toBe(true);
    expect(new Set(ticks.map(([conn]) => conn)).size).toBe(ticks.length);
    for (const [conn, nth, path] of e.requests) if (path === '/metrics') expect([nth, e.requests.some(([c, n, p]) => c === conn && n === 1 && p === '/health')]).toEqual([2, true]);
    expect(w.verdicts.every((v) => v.healthy)).toBe(true);
    // One connection a tick: the check's own is the one /health goes on.
    expect(e.connections()).toBeLessThanOrEqual(ticks.length + 1);
  });

  it('asks the engine that replaced another on its port, never the old one on a connection it kept open', async () => {
    // The old engine stops listening but holds its connections open and keeps answering 200 on them.
    const old = await engine((_conn, _nth, path) => ({ status: 200, body: path === '/metrics' ? METRICS : '' }));
    const w = watch(old.baseUrl);
    await until(() => w.verdicts.length >= 2, 'two verdicts from the old engine');
    const port = Number(new URL(old.baseUrl).port);
    await new Promise<void>((r) => {
      old.server.close(() => r());
      // close() waits for open connections, which the old engine keeps: the listener is gone at once.
      setImmediate(r);
    });
    const askedOfOld = old.requests.length;
    const replacement = await engine(() => ({ status: 503 }), port);
    await until(() => w.last()?.healthy === false, 'the replacement\'s 503s judged');
    expect(w.last()?.why).toBe(`${UNHEALTHY_AFTER_FAILURES} health probes failed in a row: GET /health answered 503`);
    expect(replacement.requests.length).toBeGreaterThanOrEqual(UNHEALTHY_AFTER_FAILURES);
    // At most the tick under way when the listener closed reached the old engine after it.
    expect(old.requests.length - askedOfOld).toBeLessThanOrEqual(1);
  });
});
