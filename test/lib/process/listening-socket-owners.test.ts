import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { type Server, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listeningSocketInodes, listeningSocketOwners, readListeningSockets } from '../../../src/lib/process/listening-socket-owners.js';

const servers: Server[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) s.close();
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await once(c, 'exit');
    }
  }
});

async function listen(host: string): Promise<number> {
  const server = createServer();
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, host, r));
  return (server.address() as { port: number }).port;
}

/** A child process listening on an ephemeral port; resolves with its pid and port. */
async function childListening(host: string): Promise<{ pid: number; port: number }> {
  const child = spawn(
    process.execPath,
    ['-e', `const s=require('net').createServer().listen(0, ${JSON.stringify(host)}, () => console.log(s.address().port)); setInterval(() => {}, 1000);`],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(child);
  const [line] = (await once(child.stdout as NodeJS.ReadableStream, 'data')) as [Buffer];
  return { pid: child.pid as number, port: Number(line.toString().trim()) };
}

describe('listeningSocketOwners', () => {
  it('names this process for a socket it listens on, over IPv4 and IPv6', async () => {
    const v4 = await listen('127.0.0.1');
    expect(await listeningSocketOwners(v4)).toEqual([process.pid]);
    const v6 = await listen('::1');
    expect(await listeningSocketOwners(v6)).toEqual([process.pid]);
  });

  it('names the child, not this process, for the child\'s socket, and honours candidates', async () => {
    const { pid, port } = await childListening('127.0.0.1');
    expect(await listeningSocketOwners(port)).toEqual([pid]);
    expect(await listeningSocketOwners(port, { candidates: [process.pid] })).toEqual([]);
    expect(await listeningSocketOwners(port, { candidates: [process.pid, pid] })).toEqual([pid]);
  });

  it('finds nothing on a port nobody listens on, and forgets a socket once closed', async () => {
    const port = await listen('127.0.0.1');
    expect((await listeningSocketInodes(port)).size).toBe(1);
    await new Promise<void>((r) => servers.pop()?.close(() => r()));
    expect(await listeningSocketOwners(port)).toEqual([]);
  });
});

/** A /proc/net/tcp line: `state` 0A is LISTEN, 01 ESTABLISHED, 06 TIME_WAIT. */
const tcpLine = (sl: number, port: number, state: string, uid: number, inode: number) =>
  `${String(sl).padStart(4)}: 0100007F:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 ${state} 00000000:00000000 00:00000000 00000000 ${String(uid).padStart(5)}        0 ${inode} 1 0000000000000000 100 0 0 10 0`;
const HEADER = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';

describe('readListeningSockets', () => {
  it('finds every listener with its uid, over many chunks of a large table and over calls, stopping early only where listeners come first', async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-proc-net-'));
    try {
      mkdirSync(join(root, 'net'));
      const lines = [HEADER];
      for (let i = 0; i < 300; i++) lines.push(tcpLine(i, 10_000 + i, '0A', i % 2 ? 65534 : 0, 1000 + i));
      for (let i = 0; i < 2000; i++) lines.push(tcpLine(300 + i, 40_000, '06', 0, 0));
      writeFileSync(join(root, 'net', 'tcp'), `${lines.join('\n')}\n`);
      const first = await readListeningSockets(root);
      expect(first).toHaveLength(300);
      expect(first[1]).toEqual({ port: 10_001, inode: '1001', uid: 65534, address: '0100007F' });
      // The first read checked the order; the next ones stop at the first TIME_WAIT line and must find the same.
      expect(await readListeningSockets(root)).toEqual(first);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('throws when neither table can be read: that is not nobody listening', async () => {
    await expect(readListeningSockets(join(tmpdir(), 'llmgw-no-proc-here'))).rejects.toThrow();
  });
});
