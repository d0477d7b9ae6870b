import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AdminServer } from '../../../src/agent/admin/admin-server.js';
import { MAX_LOG_READS } from '../../../src/agent/admin/log-call-admission.js';
import { silentLogger } from '../../../src/lib/logger.js';
import { MAX_LOG_LINES } from '../../../src/lib/max-log-lines.js';
import { previousRunLogPath } from '../../../src/lib/shard-layout.js';
import { type AgentDirs, agentDirs } from '../../helpers/agent-process.js';
import { until } from '../../helpers/engine-processes.js';
import { createInProcessAgent } from '../../helpers/in-process-agent.js';

/*
 * The Logs call's bounds (security review 2, N3) on the real admin server
 * and agent, over the real socket: root here, which the per-user caps pass
 * over (the member's side is test/security/admin-logs-bomb.test.ts), so
 * what is met is the total. The log is a previous run's, 10 MB of 1 KB
 * lines, so that a read of the most lines allowed outlasts what a client
 * that stopped reading lets through.
 */

const SHARD = 'prev-g1-r0';

async function startAdmin(): Promise<{ dirs: AgentDirs; log: string }> {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-admin-logs-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  const dirs = agentDirs(root);
  const log = previousRunLogPath(dirs.logDir, SHARD, 1);
  mkdirSync(join(log, '..'), { recursive: true });
  writeFileSync(log, Buffer.alloc(10 * 1024 * 1024, `${'y'.repeat(1023)}\n`));
  const { agent, close } = createInProcessAgent(dirs);
  onTestFinished(close);
  const admin = await AdminServer.listen({ socketPath: dirs.socket, group: '', backend: agent.admin, logger: silentLogger });
  onTestFinished(() => admin.close());
  return { dirs, log };
}

interface FirstMessage {
  /** The end of the stream (with its error, if any) rather than log lines. */
  end: boolean;
  code?: string;
  message?: string;
}

/**
 * A Logs call on a connection of its own (so that one stalled stream cannot
 * hold up another's answer): its first message, after which it reads
 * nothing more. leave() cancels it, as a client that exits does.
 */
function logsCall(socket: string, req: object): { first: Promise<FirstMessage>; leave(): void } {
  const session = http2.connect('http://localhost', { createConnection: () => net.connect(socket) });
  session.on('error', () => {});
  onTestFinished(() => {
    session.destroy();
  });
  const stream = session.request({ ':method': 'POST', ':path': '/llmgw.v1.AdminService/Logs', 'content-type': 'application/connect+json', 'connect-protocol-version': '1' });
  stream.on('error', () => {});
  const body = Buffer.from(JSON.stringify(req));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  stream.end(Buffer.concat([head, body]));
  const first = new Promise<FirstMessage>((resolve, reject) => {
    let buf = Buffer.alloc(0);
    stream.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length < 5 || buf.length < 5 + buf.readUInt32BE(1)) return;
      stream.pause();
      const msg = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString()) as { error?: { code: string; message: string } };
      resolve({ end: ((buf[0] as number) & 2) !== 0, code: msg.error?.code, message: msg.error?.message });
    });
    stream.on('close', () => reject(new Error('the stream closed before its first message')));
  });
  first.catch(() => {});
  return { first, leave: () => session.destroy() };
}

/** Whether this process (the in-process agent) has `path` open. */
const isOpen = (path: string) =>
  readdirSync('/proc/self/fd').some((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === path;
    } catch {
      return false;
    }
  });

describe('Logs on the admin socket', () => {
  it(`refuses more than ${MAX_LOG_LINES} lines, naming lines and the cap`, async () => {
    const { dirs } = await startAdmin();
    for (const req of [{ lines: MAX_LOG_LINES + 1 }, { lines: 2 ** 31 - 1, follow: true }, { lines: 2 ** 31 - 1, previous: true }]) {
      const { first } = logsCall(dirs.socket, { shardId: SHARD, ...req });
      expect(await first).toEqual({
        end: true,
        code: 'invalid_argument',
        message: `lines: at most ${MAX_LOG_LINES}, got ${req.lines}; read a longer history from the log file itself`,
      });
    }
    // The most allowed is served.
    expect(await logsCall(dirs.socket, { shardId: SHARD, lines: MAX_LOG_LINES, previous: true }).first).toEqual({ end: false });
  });

  it(`serves ${MAX_LOG_READS} reads at once, refuses the next naming the cap, and stops a read and frees its slot as soon as its client leaves`, async () => {
    const { dirs, log } = await startAdmin();
    const read = () => logsCall(dirs.socket, { shardId: SHARD, lines: MAX_LOG_LINES, previous: true });
    const held = Array.from({ length: MAX_LOG_READS }, read);
    for (const call of held) expect(await call.first).toEqual({ end: false });
    expect(await read().first).toEqual({
      end: true,
      code: 'resource_exhausted',
      message: `the agent refused the Logs call: ${MAX_LOG_READS} log reads are in progress, the most there may be; wait for one to end and try again`,
    });
    // Every read still waits on its client: none could send 10 MB to a client that stopped reading.
    expect(isOpen(log)).toBe(true);
    for (const call of held) call.leave();
    // Gone means gone: the reads stop, their file is closed, their slots are free.
    await until(() => !isOpen(log), 'the reads of clients that left to close the log');
    const again = Array.from({ length: MAX_LOG_READS }, read);
    for (const call of again) expect(await call.first).toEqual({ end: false });
  });
});
