import { spawn } from 'node:child_process';
import { appendFileSync, chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FOLLOWS_PER_USER, MAX_LOG_READS_PER_USER } from '../../src/agent/admin/log-call-admission.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { MAX_LOG_LINES } from '../../src/lib/max-log-lines.js';
import { previousRunLogPath } from '../../src/lib/shard-layout.js';
import { freePort } from '../faults/scenarios/fault-harness.js';
import { agentDirs } from '../helpers/agent-process.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { runCli } from '../helpers/run-cli.js';
import { shardIs, simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding N3 of security review 2, against the real agent, from the seat of
 * an admin-group member (nobody with the supplementary group `users`, which
 * is admin.group here): 4 connections × 32 Logs streams of lines=2^31-1 on
 * a 17 MB log of 8-byte lines, one chunk of each read, then the client
 * leaves. The agent went from 75 MB to 5.7 GB, still growing minutes after
 * the client had gone, and root's ctl status got no answer in 20 s. Here
 * the streams also ask for the most lines allowed, and for follows, and the
 * previous run's log (17 MB of 1 KB lines) is read as well.
 *
 * Measured on 2 cores, before the fix: 72 MB to 286 MB in the 6 s, a 439 MB
 * peak by the end of the test, and 1.95 s of CPU in the 2 s after the client
 * had left. After: a peak of 87-100 MB, root's Status call at most 0.42 s
 * and its ctl status at most 1 s, and 30-80 ms of CPU after the client left.
 */

const NOBODY = 65534;
const USERS_GID = 100;
const CONNECTIONS = 4;
const STREAMS_PER_CONNECTION = 32;
/** How long the member holds its streams before it leaves. */
const ATTACK_MS = 6000;
/** The bound on the agent's answer to root's Status under attack. */
const STATUS_CALL_BOUND_MS = 2000;
/** The same for the whole of a root `ctl status`, which adds a Node start-up on a machine the attack keeps busy. */
const STATUS_BOUND_MS = 5000;
/** CPU the agent may still spend in the 2 s after the member left: its own heartbeats and health checks, not abandoned reads. */
const IDLE_CPU_MS = 400;
const LOG_BYTES = 17 * 1024 * 1024;
const LIVE = 'bomb-g1-r0';
const GONE = 'gone-g1-r0';
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-logs-bomb-'));
const dirs = agentDirs(root);
let cp: HostileControlPlane;

beforeAll(async () => {
  // Open to all above the socket: the socket's own 0660 and group are what let the member in.
  chmodSync(root, 0o755);
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

/**
 * Run as nobody: opens argv[2] connections × argv[3] Logs streams, the
 * requests cycling through argv[4] (a JSON array), reads each stream's
 * first message (a log chunk, or the end of the stream with its error),
 * then stops reading it. After argv[5] ms it prints what each stream got
 * and leaves. Inline, from /, so it needs nothing of the checkout (which
 * nobody may not read).
 */
const MEMBER = `
const http2 = require('http2');
const net = require('net');
const [sock, conns, streams, requests, holdMs] = process.argv.slice(1);
const asks = JSON.parse(requests);
const got = [];
const envelope = (o) => {
  const body = Buffer.from(JSON.stringify(o));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
};
for (let c = 0; c < Number(conns); c++) {
  const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
  session.on('error', () => {});
  for (let s = 0; s < Number(streams); s++) {
    const ask = (c * Number(streams) + s) % asks.length;
    const req = session.request({ ':method': 'POST', ':path': '/llmgw.v1.AdminService/Logs', 'content-type': 'application/connect+json', 'connect-protocol-version': '1' });
    req.on('error', () => {});
    let buf = Buffer.alloc(0);
    let done = false;
    req.on('data', (d) => {
      if (done) return;
      buf = Buffer.concat([buf, d]);
      if (buf.length < 5 || buf.length < 5 + buf.readUInt32BE(1)) return;
      done = true;
      const msg = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString());
      const end = (buf[0] & 2) !== 0;
      got.push({ ask, got: end ? (msg.error ? msg.error.code : 'end') : 'lines', message: msg.error ? msg.error.message : undefined });
      buf = Buffer.alloc(0);
      // One chunk read, then no more: what the agent still has to send waits on this client.
      req.pause();
    });
    req.end(envelope(asks[ask]));
  }
}
setTimeout(() => {
  console.log(JSON.stringify(got));
  process.exit(0);
}, Number(holdMs));
`;

/** Runs MEMBER as nobody in admin.group; resolves with what each stream got once it has left. */
async function asMember(requests: object[], o: { connections: number; streams: number; holdMs: number }) {
  const member = spawn(
    'setpriv',
    [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, `--groups=${USERS_GID}`, process.execPath, '-e', MEMBER, dirs.socket, String(o.connections), String(o.streams), JSON.stringify(requests), String(o.holdMs)],
    { stdio: ['ignore', 'pipe', 'inherit'], cwd: '/' },
  );
  const exited = new Promise<number | null>((resolve) => member.once('exit', (code) => resolve(code)));
  try {
    const lines = createInterface({ input: member.stdout })[Symbol.asyncIterator]();
    const first = await lines.next();
    expect(await exited, "the member's client").toBe(0);
    return JSON.parse(String(first.value ?? '[]')) as { ask: number; got: string; message?: string }[];
  } finally {
    member.kill('SIGKILL');
  }
}

/** The agent's user plus system CPU so far, in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const rssMb = (pid: number, field: 'VmRSS' | 'VmHWM') => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;

/** Root's Status call itself, without ctl's start-up: one HTTP/1.1 request on the socket, as ctl status makes; its time in ms. */
function statusCallMs(): Promise<number> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      { socketPath: dirs.socket, method: 'POST', path: '/llmgw.v1.AdminService/Status', headers: { 'content-type': 'application/json', 'connect-protocol-version': '1' }, agent: false },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve(Date.now() - t0) : reject(new Error(`Status answered HTTP ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end('{}');
  });
}

/** Root's ctl status, over and over until `until` resolves, and its Status call alone, more often: how long each took, and any ctl that failed. */
async function statusAllAlong(until: Promise<unknown>): Promise<{ ms: number[]; calls: number[]; failed: string[] }> {
  const ms: number[] = [];
  const failed: string[] = [];
  let over = false;
  void until.finally(() => {
    over = true;
  });
  const calls: number[] = [];
  const direct = (async () => {
    while (!over) {
      calls.push(await statusCallMs().catch(() => Number.POSITIVE_INFINITY));
      await sleep(100);
    }
  })();
  while (!over) {
    const t0 = Date.now();
    const r = await runCli(['ctl', 'status', '--socket', dirs.socket, '--json'], { timeout: 20_000 });
    ms.push(Date.now() - t0);
    if (r.exitCode !== 0) failed.push(`exit ${r.exitCode}: ${r.stderr}`);
    await sleep(200);
  }
  await direct;
  return { ms, calls, failed };
}

describe('an admin-group member asking the agent for huge logs (security review 2, N3)', () => {
  it('is refused past the caps: the agent stays small, root is answered throughout, and nothing goes on after the member leaves', { timeout: 60_000 }, async () => {
    const agent = await bootAgentAgainst(cp, { dirs, nodeId: 'bomb-node', env: { LLMGW_ADMIN_GROUP: 'users' } });
    cp.send({ case: 'start', value: simStart(LIVE, await freePort(), { gpu: freeFakeGpu(0) }) });
    await cp.waitFor(shardIs(LIVE, ShardState.READY), 30_000);
    // The review's log: 17 MB of 8-byte lines, after what the engine wrote.
    const short = Buffer.alloc(LOG_BYTES, 'xxxxxxx\n');
    appendFileSync(join(dirs.logDir, 'shards', `${LIVE}.log`), short);
    // A previous run of another shard, 17 MB of 1 KB lines: the most lines allowed are 10 MB.
    const previous = previousRunLogPath(dirs.logDir, GONE, 1);
    mkdirSync(join(previous, '..'), { recursive: true });
    writeFileSync(previous, Buffer.alloc(LOG_BYTES, `${'y'.repeat(1023)}\n`));
    const rssBefore = rssMb(agent.pid, 'VmRSS');

    const huge = 2 ** 31 - 1;
    const requests = [
      { shardId: LIVE, lines: huge },
      { shardId: LIVE, lines: huge, follow: true },
      { shardId: GONE, lines: huge, previous: true },
      { shardId: LIVE, lines: MAX_LOG_LINES, follow: true },
      { shardId: GONE, lines: MAX_LOG_LINES, previous: true },
      { shardId: LIVE, lines: MAX_LOG_LINES },
    ];
    const attack = asMember(requests, { connections: CONNECTIONS, streams: STREAMS_PER_CONNECTION, holdMs: ATTACK_MS });
    const status = statusAllAlong(attack);
    const got = await attack;
    const leftAt = Date.now();
    const { ms, calls, failed } = await status;

    // Every stream was answered: a refusal that names what to do, or log lines.
    expect(got).toHaveLength(CONNECTIONS * STREAMS_PER_CONNECTION);
    for (const g of got) {
      const asked = requests[g.ask] as { lines: number };
      if (asked.lines === huge) {
        expect(g).toMatchObject({ got: 'invalid_argument', message: `lines: at most ${MAX_LOG_LINES}, got ${huge}; read a longer history from the log file itself` });
      } else if (g.got !== 'lines') {
        expect(g.got, JSON.stringify(g)).toBe('resource_exhausted');
        expect(g.message).toMatch(/^the agent refused the Logs call: (uid 65534 has \d+ log (reads|follows) in progress, the most one user other than root may|\d+ log (reads|follows) are in progress, the most users other than root may hold \(\d+ are kept for root\)); /);
      }
    }
    const served = got.filter((g) => g.got === 'lines').length;
    // Each stream served holds what it has not sent yet: at most the member's reads and follows.
    expect(served).toBeGreaterThan(0);
    expect(served).toBeLessThanOrEqual(MAX_LOG_READS_PER_USER + MAX_FOLLOWS_PER_USER);

    // Root was answered all along, every time, and quickly.
    expect(failed).toEqual([]);
    expect(ms.length).toBeGreaterThan(2);
    expect(Math.max(...ms), `root's ctl status took ${ms.join(', ')} ms`).toBeLessThan(STATUS_BOUND_MS);
    // The agent's own part of it, the 2 s.
    expect(Math.max(...calls), `root's Status calls took ${calls.join(', ')} ms`).toBeLessThan(STATUS_CALL_BOUND_MS);

    // Gone means gone: no read goes on for a client that has left.
    await sleep(Math.max(0, leftAt + 500 - Date.now()));
    const cpuBefore = cpuMs(agent.pid);
    await sleep(2000);
    const idleCpu = cpuMs(agent.pid) - cpuBefore;
    expect(idleCpu, 'CPU the agent spent in the 2 s after the member left').toBeLessThan(IDLE_CPU_MS);
    // And the member's slots are free again: as many reads at once as one user may have, each whole.
    const again = await asMember([{ shardId: GONE, lines: 10, previous: true }], { connections: 1, streams: MAX_LOG_READS_PER_USER, holdMs: 1500 });
    expect(again.map((g) => g.got)).toEqual(Array(MAX_LOG_READS_PER_USER).fill('lines'));

    if (process.env.SEC_DEBUG) {
      const sorted = [...ms].sort((a, b) => a - b);
      console.log(
        `logs bomb: RSS before ${rssBefore.toFixed(1)} MB, peak ${rssMb(agent.pid, 'VmHWM').toFixed(1)} MB; ` +
          `ctl status ${ms.length}× median ${sorted[Math.floor(sorted.length / 2)]} ms max ${sorted.at(-1)} ms; ` +
          `Status call ${calls.length}× max ${Math.max(...calls)} ms; ` +
          `served ${served} of ${got.length}; CPU after leaving ${idleCpu} ms / 2 s`,
      );
    }
    expectAgentUnharmed(agent.pid);
  });
});
