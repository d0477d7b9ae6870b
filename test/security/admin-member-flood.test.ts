import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_CONNECTIONS_PER_USER } from '../../src/agent/admin/connection-admission.js';
import { agentDirs, startAgentProcess } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

/*
 * Finding 3 of the security review, from the seat of an admin-group member
 * who is not root: `nobody` with the supplementary group `users`, which is
 * admin.group here. The socket's cap kept the agent alive, but one member
 * holding connections open could take every slot, and then root's own ctl
 * was turned away too. The kernel says who connected (SO_PEERCRED): one user
 * other than root holds at most MAX_CONNECTIONS_PER_USER, and some slots
 * are root's alone.
 */

const NOBODY = 65534;
const USERS_GID = 100;
const ATTEMPTS = 300;
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-member-'));
const dirs = agentDirs(root);
afterAll(() => rmSync(root, { recursive: true, force: true }));

/**
 * Run as nobody: opens ATTEMPTS connections to the socket, says after a
 * moment how many the agent let stay open, then holds them until killed.
 * Inline, from /, so it needs nothing of the checkout (which nobody may not read).
 */
const MEMBER = `
const net = require('net');
const socks = Array.from({ length: ${ATTEMPTS} }, () => {
  const s = net.connect(process.argv[1]);
  s.closed = false;
  s.on('error', () => {});
  s.on('close', () => { s.closed = true; });
  s.resume();
  return s;
});
setTimeout(() => {
  const open = socks.filter((s) => !s.closed).length;
  console.log(JSON.stringify({ open, closed: socks.length - open }));
  // One more, as ctl status asks: what is it told?
  const ask = net.connect(process.argv[1]);
  let answer = '';
  ask.on('data', (d) => { answer += d; });
  ask.on('error', () => {});
  ask.on('close', () => console.log(JSON.stringify({ answer })));
  ask.write('POST /llmgw.v1.AdminService/Status HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}');
}, 1500);
setInterval(() => {}, 1000);
`;

describe('an admin-group member flooding the admin socket', () => {
  it(`holds at most ${MAX_CONNECTIONS_PER_USER} connections, and root's ctl status still answers`, { timeout: 60_000 }, async () => {
    // Open to all above the socket: the socket's own 0660 and group are what let the member in.
    chmodSync(root, 0o755);
    const agent = startAgentProcess({ server: 'http://127.0.0.1:1', dirs, nodeId: 'member-node', env: { LLMGW_ADMIN_GROUP: 'users' } });
    await until(() => existsSync(dirs.socket), 'the admin socket');

    const member = spawn('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, `--groups=${USERS_GID}`, process.execPath, '-e', MEMBER, dirs.socket], {
      stdio: ['ignore', 'pipe', 'inherit'],
      cwd: '/',
    });
    try {
      const lines = createInterface({ input: member.stdout })[Symbol.asyncIterator]();
      const nextLine = async () => {
        const next = await lines.next();
        if (next.done) throw new Error("the member's client ended before saying it");
        return JSON.parse(next.value) as Record<string, unknown>;
      };
      expect(await nextLine()).toEqual({ open: MAX_CONNECTIONS_PER_USER, closed: ATTEMPTS - MAX_CONNECTIONS_PER_USER });
      // The next connection of that user is told why, in the Connect error ctl prints.
      const { answer } = (await nextLine()) as { answer: string };
      expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');
      expect(JSON.parse(answer.split('\r\n\r\n')[1] ?? '')).toEqual({
        code: 'resource_exhausted',
        message: `the agent refused the connection: uid ${NOBODY} holds ${MAX_CONNECTIONS_PER_USER} connections, the most one user other than root may; end other ctl calls or scripts on its socket and try again`,
      });

      // While the member holds its share: root gets in.
      const r = await runCli(['ctl', 'status', '--socket', dirs.socket, '--json']);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).nodeId).toBe('member-node');
      const refusal = agent.logs().find((rec) => rec.msg === 'refused admin connections: too many are open');
      expect(refusal).toMatchObject({ uid: NOBODY, pid: member.pid, why: `uid ${NOBODY} holds ${MAX_CONNECTIONS_PER_USER} connections, the most one user other than root may` });
    } finally {
      member.kill('SIGKILL');
    }
    expectAgentUnharmed(agent.pid);
    await agent.stop();
  });
});
