import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { type Server, createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { portOwnerCheck } from '../../../../src/agent/supervisor/probes/port-owner-check.js';
import { READY_TICK_MS, waitUntilServing } from '../../../../src/agent/supervisor/probes/readiness-wait.js';
import { freePort } from '../../../helpers/engine-processes.js';
import { BIN } from '../../../helpers/run-cli.js';

const servers: Server[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      process.kill(-(c.pid as number), 'SIGKILL');
      await once(c, 'exit');
    }
  }
});

/** The real sim engine, in a process group of its own as the agent starts one. */
function simEngine(port: number, loadTime: string): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'sim', 'engine', '--port', String(port), '--model', 'm', '--load-time', loadTime], {
    detached: true,
    stdio: 'ignore',
  });
  children.push(child);
  return child;
}

/** A server on `port` that answers like an engine serving model `m`, counting what it was asked. */
async function squatter(port: number): Promise<{ requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    if (req.url === '/v1/models') res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[{"id":"m"}]}');
    else res.writeHead(200).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { requests: () => requests };
}

describe('waitUntilServing with the port-owner check', () => {
  it('is ready once the engine itself answers, after a load with its port closed', async () => {
    const port = await freePort();
    const engine = simEngine(port, '1s');
    const pid = engine.pid as number;
    const ac = new AbortController();
    const outcome = await waitUntilServing({
      baseUrl: `http://127.0.0.1:${port}`,
      servedModelName: 'm',
      timeoutMs: 30_000,
      signal: ac.signal,
      portOwner: portOwnerCheck({ port, pid, pgid: pid }),
    });
    expect(outcome).toEqual({ ready: true });
  });

  it('never counts a squatter answering /health and listing the model, never asks it anything, and says who holds the port', async () => {
    const port = await freePort();
    // The engine still loading (it would fail to bind: the port is taken).
    const engine = simEngine(port, '60s');
    const pid = engine.pid as number;
    const s = await squatter(port);
    const heard: (string | undefined)[] = [];
    const ac = new AbortController();
    const outcome = await waitUntilServing({
      baseUrl: `http://127.0.0.1:${port}`,
      servedModelName: 'm',
      timeoutMs: 40 * READY_TICK_MS,
      signal: ac.signal,
      portOwner: portOwnerCheck({ port, pid, pgid: pid }),
      onWaiting: (r) => heard.push(r),
    });
    const uid = process.geteuid?.() ?? 0;
    const reason = `port ${port} held by another process (pid ${process.pid}, uid ${uid})`;
    expect(outcome).toEqual({ ready: false, reason });
    expect(heard).toEqual([reason]);
    expect(s.requests()).toBe(0);
  });

  it('without a port-owner check, probes as before (a host with no /proc/net/tcp)', async () => {
    const port = await freePort();
    const s = await squatter(port);
    const outcome = await waitUntilServing({ baseUrl: `http://127.0.0.1:${port}`, servedModelName: 'm', timeoutMs: 5000, signal: new AbortController().signal });
    expect(outcome).toEqual({ ready: true });
    expect(s.requests()).toBe(2);
  });

  it('gives the last full probe\'s reason, not that of a probe the deadline cut short', async () => {
    // Answers at once, without the model, for 1.5 s; then hangs, so the probe running at the deadline is cut.
    const port = await freePort();
    const hangAfter = Date.now() + 1500;
    const server = createServer((req, res) => {
      if (Date.now() > hangAfter) return; // no answer: only the deadline ends this probe
      if (req.url === '/v1/models') res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[{"id":"other"}]}');
      else res.writeHead(200).end();
    });
    servers.push(server);
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    const outcome = await waitUntilServing({ baseUrl: `http://127.0.0.1:${port}`, servedModelName: 'm', timeoutMs: 2500, signal: new AbortController().signal });
    expect(outcome).toEqual({ ready: false, reason: expect.stringMatching(/\/v1\/models does not list "m"/) });
  });
});
