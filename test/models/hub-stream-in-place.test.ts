import { createHash } from 'node:crypto';
import { type Server, type Socket, createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { IN_PLACE_READ_BYTES, openHubStream } from '../../src/models/hub-stream.js';

/*
 * HubStream.bodyInPlace (issue 52, item 1): a body read into one reused
 * buffer, each read handed to a consumer that must be done with it when it
 * returns. The server here is raw TCP, so an answer can be anything: garbage,
 * a head cut short, a body shorter or longer than its Content-Length, a close
 * at any point.
 */

let server: Server;
let port: number;
/** What the server does with the next connection, once it has the request's head. */
let answer: (socket: Socket) => void = (s) => s.destroy();
const sockets = new Set<Socket>();

beforeAll(async () => {
  server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let head = '';
    const onData = (c: Buffer) => {
      head += c.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      answer(socket);
    };
    socket.on('data', onData);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as { port: number }).port;
});
afterEach(() => {
  for (const s of sockets) s.destroy();
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
});

const url = () => `http://127.0.0.1:${port}/repo/resolve/c/file`;
const open = () => openHubStream(url(), { headers: {}, signal: AbortSignal.timeout(20_000) });

/** Reads the body in place, copying each read (the buffer is reused) and counting reads. */
async function readAll(s: Awaited<ReturnType<typeof open>>): Promise<{ bytes: Buffer; n: number; reads: number; buffers: Set<ArrayBufferLike> }> {
  const parts: Buffer[] = [];
  const buffers = new Set<ArrayBufferLike>();
  let reads = 0;
  const n = await s.bodyInPlace((chunk) => {
    reads++;
    buffers.add(chunk.buffer);
    parts.push(Buffer.from(chunk));
  });
  return { bytes: Buffer.concat(parts), n, reads, buffers };
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function content(n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + (i >> 11)) & 0xff;
  return b;
}

describe('a body read in place', () => {
  it('brings every byte of a large answer in order, through one reused buffer after the first reads', async () => {
    const body = content(8 * 1024 * 1024 + 12345);
    answer = (s) => s.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`), body]));
    const s = await open();
    expect(s.status).toBe(200);
    expect(s.contentLength).toBe(body.length);
    const r = await readAll(s);
    expect(r.n).toBe(body.length);
    expect(createHash('sha256').update(r.bytes).digest('hex')).toBe(createHash('sha256').update(body).digest('hex'));
    // The pool block the head came in, then the one buffer of IN_PLACE_READ_BYTES: not a buffer per read.
    expect(r.buffers.size).toBeLessThanOrEqual(3);
    expect(r.reads).toBeGreaterThanOrEqual(Math.ceil(body.length / IN_PLACE_READ_BYTES));
  });

  it('hands over a small body that came in the same packet as the head, and one of no bytes', async () => {
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello');
    const s = await open();
    // The body is read only once asked for: it came with the head and waits in the block.
    await new Promise((r) => setTimeout(r, 50));
    const r = await readAll(s);
    expect(r.bytes.toString()).toBe('hello');
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
    const empty = await readAll(await open());
    expect(empty.n).toBe(0);
    expect(empty.reads).toBe(0);
  });

  it('reads a head that comes in pieces', async () => {
    answer = (s) => {
      s.write('HTTP/1.1 20');
      setTimeout(() => s.write('0 OK\r\nContent-Le'), 20);
      setTimeout(() => s.end('ngth: 3\r\n\r\nabc'), 40);
    };
    const r = await readAll(await open());
    expect(r.bytes.toString()).toBe('abc');
  });

  it('rejects a body the connection cut short of its Content-Length, after handing over what came', async () => {
    answer = (s) => s.end(`HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n${'x'.repeat(40000)}`);
    const s = await open();
    let got = 0;
    await expect(
      s.bodyInPlace((c) => {
        got += c.length;
      }),
    ).rejects.toThrow('the connection closed after 40000 of 100000 bytes');
    expect(got).toBe(40000);
  });

  it('ends a body without Content-Length at the close (the look-alike of a cut: nothing said how long it is)', async () => {
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it');
    const s = await open();
    expect(s.contentLength).toBeUndefined();
    expect((await readAll(s)).bytes.toString()).toBe('all of it');
  });

  it('hands over no byte past Content-Length', async () => {
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfourEXTRA BYTES');
    expect((await readAll(await open())).bytes.toString()).toBe('four');
  });

  it('refuses garbage, a Content-Length that is not a number, and a connection closed before any answer', async () => {
    answer = (s) => s.end('SSH-2.0-OpenSSH_9.6\r\n\r\n');
    await expect(open()).rejects.toThrow('not an HTTP/1.1 answer: "SSH-2.0-OpenSSH_9.6"');
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n');
    await expect(open()).rejects.toThrow('a Content-Length of "12abc"');
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nContent-Len');
    await expect(open()).rejects.toThrow('the connection closed before an answer');
    answer = (s) => s.destroy();
    await expect(open()).rejects.toThrow(/closed before an answer|ECONNRESET|socket hang up/);
  });

  it('reports a chunked answer as such, with no length, for the caller to read another way', async () => {
    answer = (s) => s.end('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n');
    const s = await open();
    expect(s.chunked).toBe(true);
    expect(s.contentLength).toBeUndefined();
    s.cancel();
  });

  it("ends with the consumer's error when it throws (a write that failed), and closes the connection", async () => {
    const body = content(4 * 1024 * 1024);
    let closed = false;
    answer = (s) => {
      s.on('close', () => {
        closed = true;
      });
      s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length * 4}\r\n\r\n`);
      s.write(body);
    };
    const s = await open();
    let calls = 0;
    await expect(
      s.bodyInPlace(() => {
        if (++calls === 2) throw new Error('ENOSPC: no space left on device');
      }),
    ).rejects.toThrow('ENOSPC');
    expect(calls).toBe(2);
    await expect.poll(() => closed, { timeout: 10_000 }).toBe(true);
  });

  it('ends with the signal when it is aborted mid-body', async () => {
    answer = (s) => s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n${'y'.repeat(1000)}`);
    const ctl = new AbortController();
    const s = await openHubStream(url(), { headers: {}, signal: ctl.signal });
    const done = s.bodyInPlace(() => ctl.abort(new Error('SIGINT')));
    await expect(done).rejects.toThrow('SIGINT');
  });

  it("reads no more while the consumer's promise is pending (a hash thread fallen behind), then every byte in order", async () => {
    const body = content(4 * 1024 * 1024 + 99);
    let server: Socket | undefined;
    answer = (sock) => {
      server = sock;
      sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n`);
    };
    const s = await open();
    const parts: Buffer[] = [];
    let calls = 0;
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    const done = s.bodyInPlace((chunk) => {
      calls++;
      parts.push(Buffer.from(chunk));
      return calls === 1 ? held : undefined;
    });
    // The whole body, sent once the read in place has begun (not all of it can leave: this side stops reading).
    (server as Socket).end(body);
    await expect.poll(() => calls, { timeout: 10_000 }).toBe(1);
    // More of the body waits in the kernel while this process turns its loop: a socket still reading would bring it.
    await new Promise((r) => setTimeout(r, 100));
    expect(calls).toBe(1);
    expect(Buffer.concat(parts).length).toBeLessThan(body.length);
    release();
    await expect(done).resolves.toBe(body.length);
    expect(sha256(Buffer.concat(parts))).toBe(sha256(body));
  });

  it("ends with the error of a consumer's promise that rejects, and closes the connection", async () => {
    let closed = false;
    answer = (sock) => {
      sock.on('close', () => {
        closed = true;
      });
      sock.write(`HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n${'z'.repeat(5000)}`);
    };
    const s = await open();
    const done = s.bodyInPlace(() => Promise.reject(new Error('the hash thread exited')));
    await expect(done).rejects.toThrow('the hash thread exited');
    await expect.poll(() => closed, { timeout: 10_000 }).toBe(true);
  });

  it('is read once: a second read in place is refused', async () => {
    answer = (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n');
    const s = await open();
    const first = s.bodyInPlace(() => {});
    await expect(s.bodyInPlace(() => {})).rejects.toThrow('the body is read once');
    s.cancel(new Error('done'));
    await expect(first).rejects.toThrow('done');
  });
});
