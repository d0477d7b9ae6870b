import { type Http2Server, createServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { ConnectError, Code } from '@connectrpc/connect';
import { afterEach, describe, expect, it } from 'vitest';
import { GuardedHttp2SessionManager } from '../../../src/agent/connection/guarded-session-manager.js';

let server: Http2Server | undefined;
afterEach(async () => {
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = undefined;
});

describe('GuardedHttp2SessionManager', () => {
  it("keeps an error listener on a session the manager has let go, so a late 'error' event is reported instead of ending the process", async () => {
    server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
    const late: unknown[] = [];
    const sm = new GuardedHttp2SessionManager(
      `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      { pingIntervalMs: 60_000, pingTimeoutMs: 1000, pingIdleConnection: true, idleConnectionTimeoutMs: 60_000 },
      {},
      (err) => late.push(err),
    );
    const stream = await sm.request('GET', '/', {}, {});
    const session = stream.session;
    expect(session).toBeDefined();
    stream.resume();
    await new Promise((r) => stream.on('close', r));
    // What connect-node's own cleanup leaves when it leaves the session's state (its listeners gone), with the guard kept.
    const guards = session?.listeners('error').filter((l) => l.name === 'lateSessionError') ?? [];
    expect(guards).toHaveLength(1);
    session?.removeAllListeners('error');
    session?.on('error', guards[0] as (err: Error) => void);
    // The keep-alive's timeout destroying the session with its error, as in connect-es issue 1795.
    const closed = new Promise((r) => session?.once('close', r));
    session?.destroy(new ConnectError('PING timed out', Code.Unavailable));
    await closed;
    expect(late.map((e) => (e as ConnectError).rawMessage)).toEqual(['PING timed out']);
  });
});
