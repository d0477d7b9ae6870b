import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { callEngine } from '../../../../src/agent/supervisor/shard/shard-sleep.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A hostile engine answering every call with `bytes` of body, counting what it managed to send. */
async function bomb(bytes: number, declare: boolean): Promise<{ baseUrl: string; sent: () => number }> {
  let sent = 0;
  const chunk = Buffer.alloc(64 * 1024, 'x');
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, declare ? { 'content-length': String(bytes) } : {});
    const pump = () => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end();
    };
    res.on('error', () => {});
    pump();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { baseUrl: `http://127.0.0.1:${port}`, sent: () => sent };
}

describe('callEngine against a hostile answer (security review 3, S5)', () => {
  it('stops reading an answer past 64 KiB instead of holding it whole', async () => {
    const e = await bomb(1024 * 1024 * 1024, false);
    const call = callEngine(e.baseUrl, { method: 'POST', path: '/sleep?level=2' }, '', new AbortController().signal);
    await expect(call).rejects.toThrow(/^POST \/sleep\?level=2: the answer is over 65536 bytes/);
    // The transfer was cut: far less than the gigabyte it offered left the server.
    expect(e.sent()).toBeLessThan(256 * 1024 * 1024);
  });

  it('refuses a declared oversize answer before reading it', async () => {
    const e = await bomb(10 * 1024 * 1024, true);
    await expect(callEngine(e.baseUrl, { method: 'POST', path: '/wake_up' }, '', new AbortController().signal)).rejects.toThrow(/the answer is 10485760 bytes/);
  });

  it('sends the body and key, and takes any 2xx', async () => {
    const seen: { body: string; auth: string | undefined; type: string | undefined }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        seen.push({ body, auth: req.headers.authorization, type: req.headers['content-type'] });
        res.writeHead(200).end('null');
      });
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    await callEngine(`http://127.0.0.1:${port}`, { method: 'POST', path: '/resume_memory_occupation', body: '{}' }, 'k', new AbortController().signal);
    expect(seen).toEqual([{ body: '{}', auth: 'Bearer k', type: 'application/json' }]);
  });
});
