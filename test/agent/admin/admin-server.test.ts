import { mkdtempSync, rmSync, statSync, writeFileSync, existsSync, readFileSync, chmodSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AdminServer } from '../../../src/agent/admin/admin-server.js';
import { callUnaryJson } from '../../../src/ctl/call-unary-json.js';
import { ctlStatus } from '../../../src/ctl/ctl-status.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { findGroup } from '../../../src/lib/find-group.js';
import { silentLogger } from '../../../src/lib/logger.js';
import { type AgentDirs, agentDirs } from '../../helpers/agent-process.js';
import { until } from '../../helpers/engine-processes.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { leaveStaleSocket } from '../../helpers/stale-socket.js';
import { createInProcessAgent } from '../../helpers/in-process-agent.js';

/** A group every Debian-like system has, which root is not a member of by default. */
const ADMIN_GROUP = 'adm';

function newDirs(): AgentDirs {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-admin-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  // The socket one level down, so the server creates its directory.
  return { ...agentDirs(root), socket: join(root, 'run', 'agent.sock') };
}

async function startAdmin(dirs: AgentDirs, over: Partial<Parameters<typeof AdminServer.listen>[0]> = {}): Promise<AdminServer> {
  const { agent, close } = createInProcessAgent(dirs);
  onTestFinished(close);
  const admin = await AdminServer.listen({ socketPath: dirs.socket, group: '', backend: agent.admin, logger: silentLogger, ...over });
  onTestFinished(() => admin.close());
  return admin;
}

async function expectLlmgwError(p: Promise<unknown>, exitCode: number, message: RegExp): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LlmgwError);
  expect((err as LlmgwError).exitCode).toBe(exitCode);
  expect((err as LlmgwError).message).toMatch(message);
}

describe('AdminServer', () => {
  it('creates the socket 0660 with the admin group, in a directory it creates 0750 with that group', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { group: ADMIN_GROUP });
    const gid = findGroup({ name: ADMIN_GROUP })?.gid;
    const sock = statSync(dirs.socket);
    expect(sock.isSocket()).toBe(true);
    expect((sock.mode & 0o777).toString(8)).toBe('660');
    expect(sock.gid).toBe(gid);
    const dir = statSync(join(dirs.root, 'run'));
    expect((dir.mode & 0o777).toString(8)).toBe('750');
    expect(dir.gid).toBe(gid);
  });

  it('gives every directory level it creates mode 0750 and the admin group', async () => {
    const dirs = newDirs();
    await startAdmin({ ...dirs, socket: join(dirs.root, 'a', 'b', 'agent.sock') }, { group: ADMIN_GROUP });
    const gid = findGroup({ name: ADMIN_GROUP })?.gid;
    for (const d of [join(dirs.root, 'a'), join(dirs.root, 'a', 'b')]) {
      expect([(statSync(d).mode & 0o777).toString(8), statSync(d).gid]).toEqual(['750', gid]);
    }
  });

  it('creates the socket 0660 even under a umask of 0, and restores the umask', async () => {
    const dirs = newDirs();
    const before = process.umask(0);
    try {
      await startAdmin(dirs);
      expect(process.umask()).toBe(0);
    } finally {
      process.umask(before);
    }
    expect((statSync(dirs.socket).mode & 0o777).toString(8)).toBe('660');
  });

  it('answers Status with the agent it serves', async () => {
    const dirs = newDirs();
    await startAdmin(dirs);
    const status = await ctlStatus(dirs.socket);
    expect(status.nodeId).toBe('node-in-process');
    expect(status.pid).toBe(process.pid);
    expect(status.connection?.state).toBe('CONNECTION_STATE_STARTING');
    expect(status.shards).toEqual([]);
  });

  it('replaces a stale socket file that nobody listens on', async () => {
    const stale = newDirs();
    await execa('mkdir', ['-p', join(stale.root, 'run')]);
    await leaveStaleSocket(stale.socket);
    await startAdmin(stale);
    expect((await ctlStatus(stale.socket)).nodeId).toBe('node-in-process');
  });

  it('refuses to start while another agent answers on the socket (exit 1, saying so), and leaves it serving', async () => {
    const dirs = newDirs();
    await startAdmin(dirs);
    await expectLlmgwError(startAdmin(dirs), 1, /another agent is already listening on .*agent\.sock/);
    expect((await ctlStatus(dirs.socket)).nodeId).toBe('node-in-process');
  });

  it('refuses a path that is not a socket and leaves the file alone', async () => {
    const dirs = newDirs();
    await execa('mkdir', ['-p', join(dirs.root, 'run')]);
    writeFileSync(dirs.socket, 'precious');
    await expectLlmgwError(startAdmin(dirs), 1, /exists and is not a socket/);
    expect(readFileSync(dirs.socket, 'utf8')).toBe('precious');
  });

  it('names an unknown admin.group in a configuration error (exit 78) before touching the path', async () => {
    const dirs = newDirs();
    await expectLlmgwError(startAdmin(dirs, { group: 'no-such-group-llmgw' }), 78, /admin\.group: no group named "no-such-group-llmgw" in \/etc\/group/);
    expect(existsSync(join(dirs.root, 'run'))).toBe(false);
  });

  it('gives an existing agent-owned 0750 directory (systemd RuntimeDirectory) the admin group', async () => {
    const dirs = newDirs();
    await execa('mkdir', ['-p', join(dirs.root, 'run')]);
    chmodSync(join(dirs.root, 'run'), 0o750);
    await startAdmin(dirs, { group: ADMIN_GROUP });
    expect(statSync(join(dirs.root, 'run')).gid).toBe(findGroup({ name: ADMIN_GROUP })?.gid);
  });

  it('leaves the group of an existing 0750 directory that holds other files, and says so (review finding 13)', async () => {
    const dirs = newDirs();
    const dir = join(dirs.root, 'run');
    await execa('mkdir', ['-p', dir]);
    chmodSync(dir, 0o750);
    writeFileSync(join(dir, 'not-ours'), 'x');
    const before = statSync(dir).gid;
    const logger = captureLogger();
    await startAdmin(dirs, { group: ADMIN_GROUP, logger: logger.logger });
    expect(statSync(dir).gid).toBe(before);
    expect(logger.records.some((r) => String(r.msg).startsWith('the admin socket directory holds other files') && (r.entries as string[]).includes('not-ours'))).toBe(true);
  });

  it('removes the socket file when it closes', async () => {
    const dirs = newDirs();
    const admin = await startAdmin(dirs);
    await admin.close();
    expect(existsSync(dirs.socket)).toBe(false);
  });

  it('keeps answering while a client that sends nothing holds a connection, and closes that connection', async () => {
    const dirs = newDirs();
    await startAdmin(dirs, { silentConnectionTimeoutMs: 500 });
    const silent = connect(dirs.socket);
    onTestFinished(() => {
      silent.destroy();
    });
    let silentClosed = false;
    silent.on('close', () => {
      silentClosed = true;
    });
    silent.on('error', () => {});
    // Reads (and drops) the server's greeting, so that the end of the stream is seen.
    silent.resume();
    await new Promise((resolve) => silent.once('connect', resolve));
    for (let i = 0; i < 5; i++) expect((await ctlStatus(dirs.socket)).nodeId).toBe('node-in-process');
    await until(() => silentClosed, 'the server to close the silent connection', 10_000);
  });

  it('answers 1,000 concurrent Status calls, each on its own connection', async () => {
    const dirs = newDirs();
    await startAdmin(dirs);
    const calls = Array.from({ length: 1000 }, () => callUnaryJson<{ nodeId: string }>(dirs.socket, 'Status', {}, { timeoutMs: 60_000 }));
    const results = await Promise.allSettled(calls);
    const failed = results.filter((r) => r.status === 'rejected');
    expect(failed.map((r) => String((r as PromiseRejectedResult).reason)).slice(0, 3)).toEqual([]);
    expect(results.every((r) => r.status === 'fulfilled' && r.value.nodeId === 'node-in-process')).toBe(true);
  }, 120_000);
});
