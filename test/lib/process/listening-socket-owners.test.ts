import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { type Server, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { listeningSocketInodes, listeningSocketOwners } from '../../../src/lib/process/listening-socket-owners.js';

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
