import { mkdtempSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { callUnaryJson } from '../../src/ctl/call-unary-json.js';
import { LlmgwError } from '../../src/lib/errors.js';

function socketPath(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-unary-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return join(root, 'agent.sock');
}

function listen(server: net.Server | http2.Http2Server, path: string): Promise<void> {
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return new Promise((resolve) => server.listen(path, resolve));
}

describe('callUnaryJson', () => {
  it('asks an agent that serves only HTTP/2 (started before an upgrade) again over HTTP/2', async () => {
    const path = socketPath();
    const seen: string[] = [];
    const server = http2.createServer((req, res) => {
      seen.push(`${req.httpVersion} ${req.url}`);
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"nodeId":"old-agent"}');
      });
    });
    server.on('sessionError', () => {});
    await listen(server, path);
    expect(await callUnaryJson<{ nodeId: string }>(path, 'Status', {})).toEqual({ nodeId: 'old-agent' });
    expect(seen).toEqual(['2.0 /llmgw.v1.AdminService/Status']);
  });

  it('reports an answer cut in its body as the agent not answering (exit 69), never as a result', async () => {
    const path = socketPath();
    const server = net.createServer((s) => {
      s.on('error', () => {});
      s.once('data', () => s.end('HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"nodeId":'));
    });
    await listen(server, path);
    const err = await callUnaryJson(path, 'Status', {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(69);
    expect((err as LlmgwError).message).toMatch(/cut or malformed.*2 of 50|10 of 50/);
  });

  it('stops reading an answer larger than its limit', async () => {
    const path = socketPath();
    const server = net.createServer((s) => {
      s.on('error', () => {});
      s.once('data', () => {
        s.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n');
        const chunk = `100000\r\n${'x'.repeat(0x100000)}\r\n`;
        const pump = () => {
          while (!s.destroyed && s.write(chunk));
          if (!s.destroyed) s.once('drain', pump);
        };
        pump();
      });
    });
    await listen(server, path);
    const err = await callUnaryJson(path, 'Status', {}).catch((e: unknown) => e);
    expect((err as LlmgwError).message).toMatch(/larger than 16 MiB/);
  });
});

describe('callUnaryJson against an agent that stops while it holds the call', () => {
  it('says the agent went away and that the change may or may not be done (exit 69), never that it is not running', async () => {
    const path = socketPath();
    const held: net.Socket[] = [];
    const server = net.createServer((s) => {
      s.on('error', () => {});
      // The call is taken and held (a wake waiting on its engine), then the agent stops: socket gone, connection closed.
      s.once('data', () => {
        held.push(s);
        server.close();
        for (const c of held) c.destroy();
      });
    });
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const err = await callUnaryJson(path, 'Wake', { shardId: 's' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(69);
    expect((err as LlmgwError).message).toMatch(/went away before it answered Wake: it may or may not have been done/);
    expect((err as LlmgwError).message).not.toMatch(/not running/);
  });

  it('still says "not running" when there was never an agent to take the call (the look-alike)', async () => {
    const err = await callUnaryJson(socketPath(), 'Wake', { shardId: 's' }).catch((e: unknown) => e);
    expect((err as LlmgwError).exitCode).toBe(69);
    expect((err as LlmgwError).message).toMatch(/the agent is not running: no socket/);
  });
});
