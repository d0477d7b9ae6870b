import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { type Server, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { listeningSockets } from '../../../src/lib/process/listening-socket-owners.js';
import { netlinkListeners, netlinkListeningPorts } from '../../../src/lib/process/netlink-listeners.js';
import { freePort, until } from '../../helpers/engine-processes.js';

const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

async function listen(port: number, host: string): Promise<void> {
  const s = createServer();
  servers.push(s);
  await new Promise<void>((r) => s.listen(port, host, r));
}

const byInode = (a: { inode: string }, b: { inode: string }) => a.inode.localeCompare(b.inode);

describe('netlinkListeningPorts', () => {
  it('lists every port listened on, IPv4 and IPv6, and not a port nobody listens on', async () => {
    const v4 = await freePort();
    const v6 = await freePort();
    await listen(v4, '127.0.0.1');
    await listen(v6, '::1');
    const closed = await freePort();
    const ports = netlinkListeningPorts();
    if ('unsupported' in ports) throw new Error(ports.unsupported);
    expect(ports.has(v4)).toBe(true);
    expect(ports.has(v6)).toBe(true);
    expect(ports.has(closed)).toBe(false);
  });
});

describe('netlinkListeners', () => {
  it('lists the IPv4 and IPv6 listeners of one port exactly as /proc/net/tcp{,6} does, and no other port', async () => {
    const port = await freePort();
    const other = await freePort();
    await listen(port, '127.0.0.1');
    await listen(port, '::1');
    await listen(other, '127.0.0.1');
    const asked = netlinkListeners(port);
    if ('unsupported' in asked) throw new Error(asked.unsupported);
    expect(asked).toHaveLength(2);
    expect([...asked].sort(byInode)).toEqual((await listeningSockets(port)).sort(byInode));
    expect(netlinkListeners(await freePort())).toEqual([]);
  });

  it.skipIf(process.geteuid?.() !== 0)("names another user's listener by its uid: a socket nobody opened", async () => {
    const port = await freePort();
    const child = spawn('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', `require('net').createServer().listen(${port},'127.0.0.1');setInterval(()=>{},1000)`], {
      stdio: 'ignore',
      cwd: '/',
    });
    try {
      await until(() => {
        const asked = netlinkListeners(port);
        return !('unsupported' in asked) && asked.length === 1;
      }, 'nobody to listen');
      const asked = netlinkListeners(port);
      expect(asked).toEqual(await listeningSockets(port));
      expect(!('unsupported' in asked) && asked[0]?.uid).toBe(65534);
    } finally {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
  });
});
