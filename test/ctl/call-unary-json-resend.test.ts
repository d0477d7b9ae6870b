import { mkdtempSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AdminServer } from '../../src/agent/admin/admin-server.js';
import { callUnaryJson } from '../../src/ctl/call-unary-json.js';
import { agentDirs } from '../helpers/agent-process.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { createInProcessAgent } from '../helpers/in-process-agent.js';
import { runCli } from '../helpers/run-cli.js';

/*
 * A write is never sent twice by ctl on its own (call-unary-json.ts,
 * ensureNeverRan): a connection closed without a byte is what an HTTP/2-only
 * agent and an agent stopped while it held the call both look like; only the
 * first never ran the request, and only to it is the write sent again.
 */

function newRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-resend-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

function closeServer(server: net.Server | http2.Http2Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** What the fake agents saw: `<HTTP version> <method>`, in order. */
type Seen = string[];

/**
 * An HTTP/2-only agent (node:http2 without allowHTTP1). With `silent`, an
 * HTTP/1.1 connection is closed without a byte (what an HTTP/2 server may do
 * before its SETTINGS are out) instead of being answered by SETTINGS and GOAWAY.
 */
async function http2OnlyAgent(path: string, seen: Seen, silent: boolean): Promise<{ connections: () => number }> {
  let connections = 0;
  const h2 = http2.createServer((req, res) => {
    seen.push(`${req.httpVersion} ${req.url.split('/').pop()}`);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"cordoned":true}');
    });
  });
  h2.on('sessionError', () => {});
  h2.on('connection', () => connections++);
  let server: net.Server | http2.Http2Server = h2;
  if (silent) {
    // HTTP/2 (its preface) goes through to the HTTP/2 server on a second socket; anything else is closed unanswered.
    const inner = `${path}.h2`;
    onTestFinished(() => closeServer(h2));
    await new Promise<void>((resolve) => h2.listen(inner, resolve));
    server = net.createServer((s) => {
      s.on('error', () => {});
      s.once('data', (first: Buffer) => {
        if (first.toString('latin1').startsWith('PRI * HTTP/2.0')) {
          const to = net.connect(inner);
          to.on('error', () => s.destroy());
          s.on('close', () => to.destroy());
          to.on('close', () => s.destroy());
          to.write(first);
          s.pipe(to);
          to.pipe(s);
          return;
        }
        seen.push(`1.1 ${first.toString('latin1').split(' ')[1]?.split('/').pop()}`);
        s.destroy();
      });
    });
  }
  onTestFinished(() => closeServer(server));
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { connections: () => connections };
}

describe('a write whose connection closed without a byte', () => {
  it('is not sent again to the agent restarted in its place, and ctl says it went away (exit 69)', { timeout: 90_000 }, async () => {
    const dirs = agentDirs(newRoot());
    const { agent, close } = createInProcessAgent(dirs);
    onTestFinished(close);
    const { logger } = captureLogger('info');
    let taken = 0;
    // The agent that takes the cordon and is stopped before it answers; the next one listens before the
    // connection closes, so ctl's next dial finds it (the race the fix is about, made certain).
    const first = net.createServer((s) => {
      s.on('error', () => {});
      s.once('data', () => {
        taken++;
        // close() gives up the path at once (its callback would wait for this very connection).
        first.close();
        void AdminServer.listen({ socketPath: dirs.socket, group: '', backend: agent.admin, logger, stopping: new AbortController().signal }).then((next) => {
          onTestFinished(() => next.close());
          s.destroy();
        });
      });
    });
    onTestFinished(() => {
      if (first.listening) first.close();
    });
    await new Promise<void>((resolve) => first.listen(dirs.socket, resolve));

    const r = await runCli(['ctl', 'cordon', '--reason', 'asked once', '--socket', dirs.socket]);
    expect(taken).toBe(1);
    expect(r.exitCode, r.stderr).toBe(69);
    expect(r.stderr).toMatch(/went away before it answered Cordon: it may or may not have been done/);
    // The restarted agent was asked only whether it speaks HTTP/1.1 (a Status), never to cordon.
    const status = await callUnaryJson<{ conditions?: { type: string; active?: boolean }[] }>(dirs.socket, 'Status', {});
    expect(status.conditions?.find((c) => c.type === 'Cordoned')?.active ?? false).toBe(false);
  });

  it('is sent once over HTTP/2 to an agent that serves only HTTP/2, and answered', async () => {
    const path = join(newRoot(), 'agent.sock');
    const seen: Seen = [];
    const agent = await http2OnlyAgent(path, seen, false);
    expect(await callUnaryJson(path, 'Cordon', { cordon: true, reason: 'r' })).toEqual({ cordoned: true });
    expect(seen).toEqual(['2.0 Cordon']);
    // Its SETTINGS and GOAWAY to the HTTP/1.1 request were proof enough: no probe between (two connections, not three).
    expect(agent.connections()).toBe(2);
  });

  it('is sent over HTTP/2 after a read also closed without a byte: an HTTP/2-only agent, which ran neither', async () => {
    const path = join(newRoot(), 'agent.sock');
    const seen: Seen = [];
    await http2OnlyAgent(path, seen, true);
    expect(await callUnaryJson(path, 'Cordon', { cordon: true, reason: 'r' })).toEqual({ cordoned: true });
    expect(seen).toEqual(['1.1 Cordon', '1.1 Status', '2.0 Cordon']);
  });

  it('a read keeps its plain fallback: asked again over HTTP/2 at once, with no probe', async () => {
    const path = join(newRoot(), 'agent.sock');
    const seen: Seen = [];
    await http2OnlyAgent(path, seen, true);
    expect(await callUnaryJson(path, 'Status', {})).toEqual({ cordoned: true });
    expect(seen).toEqual(['1.1 Status', '2.0 Status']);
  });
});
