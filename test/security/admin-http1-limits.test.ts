import { create } from '@bufbuild/protobuf';
import { EventsRequestSchema } from '../../src/gen/llmgw/v1/admin_pb.js';
import { openAdminClient } from '../../src/ctl/open-admin-client.js';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ADMIN_REQUEST_MAX_BYTES, AdminServer, MAX_STREAMS_PER_SESSION } from '../../src/agent/admin/admin-server.js';
import type { AdminBackend } from '../../src/agent/admin/admin-backend.js';
import { callUnaryJson } from '../../src/ctl/call-unary-json.js';
import { silentLogger } from '../../src/lib/logger.js';
import { type AgentDirs, agentDirs } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { createInProcessAgent } from '../helpers/in-process-agent.js';

/*
 * The admin socket speaks HTTP/1.1 beside HTTP/2 (for ctl status's cold
 * start). Every limit issue 19 put on HTTP/2 must hold on HTTP/1.1 as well,
 * or the second door is the way around them: request size, no request
 * compression, the connection cap, silent and idle closes, the call deadline,
 * and calls in flight per connection (HTTP/1.1 pipelining). Real server,
 * real Unix socket, raw bytes from a client no library tidies up.
 */

const STATUS = '/llmgw.v1.AdminService/Status';

function newDirs(): AgentDirs {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-admin-h1-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return agentDirs(root);
}

async function startAdmin(dirs: AgentDirs, over: Partial<Parameters<typeof AdminServer.listen>[0]> = {}, backend?: (agent: AdminBackend) => AdminBackend) {
  const { agent, close } = createInProcessAgent(dirs);
  onTestFinished(close);
  const admin = await AdminServer.listen({ socketPath: dirs.socket, group: '', backend: backend ? backend(agent.admin) : agent.admin, logger: silentLogger, ...over });
  onTestFinished(() => admin.close());
  return admin;
}

/** A raw connection: what it received, and whether the server closed it. */
interface RawConnection {
  socket: net.Socket;
  received(): string;
  closed: Promise<void>;
  isClosed(): boolean;
}

async function rawConnect(path: string): Promise<RawConnection> {
  const socket = net.connect(path);
  onTestFinished(() => {
    socket.destroy();
  });
  const chunks: Buffer[] = [];
  let closedNow = false;
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      closedNow = true;
      resolve();
    }),
  );
  await new Promise((resolve) => socket.once('connect', resolve));
  return { socket, received: () => Buffer.concat(chunks).toString('latin1'), closed, isClosed: () => closedNow };
}

/** One HTTP/1.1 request with node:http, on a fresh connection; the status and body. */
function post(path: string, headers: http.OutgoingHttpHeaders, body: Buffer | string, url = STATUS): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: path, method: 'POST', path: url, headers: { 'connect-protocol-version': '1', ...headers }, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const statusRequest = (extra = '') => `POST ${STATUS} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n${extra}\r\n{}`;

describe('the admin socket over HTTP/1.1', () => {
  it('answers Status to ctl, to node:http and to a raw request, and still to HTTP/2 on the same socket', async () => {
    const dirs = newDirs();
    await startAdmin(dirs);
    expect((await callUnaryJson<{ nodeId: string }>(dirs.socket, 'Status', {})).nodeId).toBe('node-in-process');
    const viaHttp = await post(dirs.socket, { 'content-type': 'application/json' }, '{}');
    expect(viaHttp.status).toBe(200);
    expect(JSON.parse(viaHttp.body).nodeId).toBe('node-in-process');
    const raw = await rawConnect(dirs.socket);
    raw.socket.write(statusRequest('Connection: close\r\n'));
    await raw.closed;
    expect(raw.received()).toMatch(/^HTTP\/1\.1 200 /);
    expect(raw.received()).toContain('"nodeId":"node-in-process"');
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(dirs.socket) });
    onTestFinished(() => {
      session.destroy();
    });
    const h2status = await new Promise<number>((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': STATUS, 'content-type': 'application/json', 'connect-protocol-version': '1' });
      req.on('response', (h) => resolve(Number(h[':status'])));
      req.on('error', reject);
      req.resume();
      req.end('{}');
    });
    expect(h2status).toBe(200);
  });

  it('refuses a gzip request and one larger than the request limit, as over HTTP/2', async () => {
    const dirs = newDirs();
    await startAdmin(dirs);
    const bomb = gzipSync(Buffer.alloc(8 * 1024 * 1024, Buffer.from([0x78, 0x00])));
    const gz = await post(dirs.socket, { 'content-type': 'application/proto', 'content-encoding': 'gzip' }, bomb);
    expect(gz.status).not.toBe(200);
    const big = await post(dirs.socket, { 'content-type': 'application/proto' }, Buffer.alloc(ADMIN_REQUEST_MAX_BYTES + 2, Buffer.from([0x78, 0x00])));
    expect(big.status).not.toBe(200);
    // Within the limit the same body is answered: the refusal is the size, not the form.
    const small = await post(dirs.socket, { 'content-type': 'application/proto' }, Buffer.alloc(1024, Buffer.from([0x78, 0x00])));
    expect(small.status).toBe(200);
  });

  it('closes a connection that sends part of a request line and no more (slow headers), and one left idle after its call', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { silentConnectionTimeoutMs: 300, idleSessionTimeoutMs: 300 });
    const partial = await rawConnect(dirs.socket);
    // Three bytes: not enough to tell HTTP/1.1 from HTTP/2's preface.
    partial.socket.write('POS');
    const slowHeaders = await rawConnect(dirs.socket);
    slowHeaders.socket.write('POST /llmgw.v1.AdminService/Status HTTP/1.1\r\nHost: local');
    const idle = await rawConnect(dirs.socket);
    idle.socket.write(statusRequest());
    await until(() => idle.received().includes('nodeId'), 'the keep-alive call to be answered', 10_000);
    await Promise.all([partial.closed, slowHeaders.closed, idle.closed]);
    expect(slowHeaders.received()).toBe('');
  });

  it('closes a connection that pipelines more calls than an HTTP/2 session may have streams', async () => {
    const dirs = newDirs();
    let held = 0;
    await startAdmin(dirs, {}, (agent) =>
      Object.assign(Object.create(agent) as AdminBackend, {
        // Adopt that never ends: every pipelined call stays in flight.
        adoptNow: () => {
          held += 1;
          return new Promise(() => {});
        },
      }),
    );
    const flood = await rawConnect(dirs.socket);
    const adopt = `POST /llmgw.v1.AdminService/Adopt HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    flood.socket.write(adopt.repeat(MAX_STREAMS_PER_SESSION * 20));
    await flood.closed;
    expect(held).toBeLessThanOrEqual(MAX_STREAMS_PER_SESSION + 1);
    expect((await callUnaryJson<{ nodeId: string }>(dirs.socket, 'Status', {})).nodeId).toBe('node-in-process');
  });

  it('cuts a call past the per-call deadline, with nothing sent back', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { callDeadlineMs: 300 }, (agent) =>
      Object.assign(Object.create(agent) as AdminBackend, { adoptNow: () => new Promise(() => {}) }),
    );
    const hung = await rawConnect(dirs.socket);
    hung.socket.write(`POST /llmgw.v1.AdminService/Adopt HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`);
    await hung.closed;
    expect(hung.received()).toBe('');
  });

  it('keeps an Events follow open past the per-call deadline, as a Logs follow (ctl events -f died at 60 s)', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { callDeadlineMs: 300 });
    const { client, close } = await openAdminClient(dirs.socket);
    onTestFinished(close);
    const left = new AbortController();
    onTestFinished(() => left.abort());
    const stream = client.events(create(EventsRequestSchema, { follow: true }), { signal: left.signal })[Symbol.asyncIterator]();
    await stream.next();
    // Five deadlines later the stream still stands: the next event would reach it.
    const next = stream.next();
    let ended = false;
    next.then(() => (ended = true), () => (ended = true));
    await new Promise((r) => setTimeout(r, 1500));
    expect(ended).toBe(false);
  });

  it('counts HTTP/1.1 connections against the same cap as HTTP/2 ones, tells the one refused why, and serves again when they go', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { maxConnections: 4 });
    const held = await Promise.all(Array.from({ length: 4 }, () => rawConnect(dirs.socket)));
    // Each has begun a request: past the sniffing, on the HTTP/1.1 server.
    for (const c of held) c.socket.write('POST /llmgw.v1.AdminService/Status HTTP/1.1\r\n');
    const refused = await rawConnect(dirs.socket);
    await refused.closed;
    // Answered before its request was read, then closed: a ctl prints the reason.
    const [head, body] = refused.received().split('\r\n\r\n');
    expect(head?.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');
    expect(JSON.parse(body ?? '')).toEqual({
      code: 'resource_exhausted',
      message: 'the agent refused the connection: 4 connections are open, the most there may be; end other ctl calls or scripts on its socket and try again',
    });
    for (const c of held) c.socket.destroy();
    await Promise.all(held.map((c) => c.closed));
    await until(async () => (await post(dirs.socket, { 'content-type': 'application/json' }, '{}').catch(() => ({ status: 0 }))).status === 200, 'a call to be answered again', 10_000);
  });

  it('ends a keep-alive HTTP/1.1 connection when the server closes, letting its call in progress finish first', async () => {
    const dirs = newDirs();
    const admin = await startAdmin(dirs);
    const idle = await rawConnect(dirs.socket);
    idle.socket.write(statusRequest());
    await until(() => idle.received().includes('nodeId'), 'the call to be answered', 10_000);
    // close() resolves once the listener has no connection left, this one included.
    await admin.close();
    await until(() => idle.isClosed(), 'the client to see its connection closed', 5000);
  });
});
