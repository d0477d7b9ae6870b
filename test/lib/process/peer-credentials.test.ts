import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type PeerCredentials, peerCredentials } from '../../../src/lib/process/peer-credentials.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-peercred-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A Unix socket server that resolves with the credentials of its first connection. */
function firstPeer(path: string): Promise<{ creds: PeerCredentials | undefined; server: net.Server }> {
  return new Promise((resolve) => {
    const server = net.createServer((socket) => {
      resolve({ creds: peerCredentials(socket), server });
      socket.destroy();
    });
    server.listen(path);
  });
}

describe('peerCredentials', () => {
  it("reads this process's own pid, uid and gid from a connection it made", async () => {
    const path = join(dir, 'self.sock');
    const peer = firstPeer(path);
    await new Promise((r) => setTimeout(r, 50));
    const client = net.connect(path);
    const { creds, server } = await peer;
    client.destroy();
    server.close();
    expect(creds).toEqual({ pid: process.pid, uid: process.getuid?.(), gid: process.getgid?.() });
  });

  it.skipIf(process.geteuid?.() !== 0)("reads another user's: a client run as nobody through setpriv", async () => {
    const open = mkdtempSync(join(tmpdir(), 'llmgw-peercred-open-'));
    chmodSync(open, 0o755);
    const path = join(open, 'nobody.sock');
    const peer = firstPeer(path);
    await new Promise((r) => setTimeout(r, 50));
    chmodSync(path, 0o777);
    // setpriv execs node, so the client's pid is the child's.
    const child = spawn('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', `require('net').connect(${JSON.stringify(path)}).on('error', () => {}); setTimeout(() => {}, 2000)`], {
      stdio: 'ignore',
      cwd: '/',
    });
    try {
      const { creds, server } = await peer;
      server.close();
      expect(creds).toEqual({ pid: child.pid, uid: 65534, gid: 65534 });
    } finally {
      child.kill('SIGKILL');
      rmSync(open, { recursive: true, force: true });
    }
  });
});
