#!/usr/bin/env node
/**
 * The floor of figure 5b: what an agent with 8 READY shards must do each
 * second in steady state, and nothing else, in plain Node (no agent code),
 * so that the agent's CPU can be given as a ratio to it measured on the same
 * machine in the same minute. An absolute percentage does not hold across
 * machines (issue 29: 0.38–0.52 % here, 0.88–1.32 % on another EPYC); what
 * the agent adds to the work itself should.
 *
 * It does what the agent does with the bench's configuration (production
 * defaults, src/agent/config/config-keys.ts), at the same intervals:
 *
 * - every 10 s (supervisor.health_interval) per shard: the port-owner check
 *   (one TCP connect to see something accepts, then a LISTEN-only
 *   NETLINK_SOCK_DIAG dump per family through koffi, as
 *   src/lib/process/netlink-listeners.ts), GET /health, and GET /metrics
 *   with the gauges and counters the stall detector and load meter read;
 * - every 1 s (heartbeat_interval): one Heartbeat with the GPUs' memory on
 *   a Connect bidi stream over HTTP/2, pinged every 2 s as the agent's
 *   transport is (PING_FLOOR_MS, 2 × heartbeat);
 * - GPU memory: one `nvidia-smi --query-gpu=index,memory.used --loop-ms=1000`
 *   for its life, its lines read (gpu-memory-sampler.ts);
 * - every 2 s: one stat of each shard's log (LOG_CHECK_INTERVAL_MS);
 * - every 10 s: statfs of the log and state directories (disk pressure);
 * - every 60 s (discovery.interval): the rescan's nvidia-smi calls
 *   (--query-gpu, then -L, --query-compute-apps and --version together, then
 *   topo -m; probe-gpus.ts, probe-topology.ts).
 *
 * node bench/steady-floor.mjs <server> <node-id> <nvidia-smi> <state-dir> <log-dir> <port>...
 */
import { spawn } from 'node:child_process';
import { stat, statfs } from 'node:fs/promises';
import { request } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import { createConnectTransport } from '@connectrpc/connect-node';
import koffi from 'koffi';
import { AgentMessageSchema, AgentService } from '../dist/gen/llmgw/v1/agent_pb.js';

const [server, nodeId, nvidiaSmi, stateDir, logDir, ...portArgs] = process.argv.slice(2);
const ports = portArgs.map(Number);
if (!server || !nodeId || !nvidiaSmi || !stateDir || !logDir || ports.length === 0) {
  process.stderr.write('usage: node bench/steady-floor.mjs <server> <node-id> <nvidia-smi> <state-dir> <log-dir> <port>...\n');
  process.exit(2);
}
const HEALTH_INTERVAL_MS = 10_000;
const HEARTBEAT_MS = 1000;
const LOG_CHECK_MS = 2000;
const DISK_MS = 10_000;
const DISCOVERY_MS = 60_000;

// --- GPU memory: one nvidia-smi loop, as the agent's sampler.
const memory = [];
const loop = spawn(nvidiaSmi, ['--query-gpu=index,memory.used', '--format=csv,noheader,nounits', `--loop-ms=${HEARTBEAT_MS}`], {
  stdio: ['ignore', 'pipe', 'ignore'],
  detached: true,
  env: { ...process.env, LC_ALL: 'C' },
});
let partial = '';
loop.stdout.setEncoding('utf8').on('data', (chunk) => {
  const lines = (partial + chunk).split('\n');
  partial = lines.pop() ?? '';
  for (const line of lines) {
    const m = /^(\d+)\s*,\s*(\d+)/.exec(line.trim());
    if (m) memory[Number(m[1])] = Number(m[2]);
  }
});
// A clean exit on the bench's SIGTERM, so a --cpu-prof run writes the floor's profile too.
process.on('SIGTERM', () => process.exit(0));
process.on('exit', () => {
  try {
    process.kill(-loop.pid, 'SIGKILL');
  } catch {}
});

// --- The stream: Register once, then a heartbeat a second.
const transport = createConnectTransport({ baseUrl: server, httpVersion: '2', pingIntervalMs: 2 * HEARTBEAT_MS, pingTimeoutMs: 2 * HEARTBEAT_MS, pingIdleConnection: true });
const client = createClient(AgentService, transport);
const requests = createWritableIterable();
let id = 0n;
const send = (msg) => requests.write(create(AgentMessageSchema, { messageId: ++id, msg }));
const replies = client.connect(requests)[Symbol.asyncIterator]();
void send({ case: 'register', value: { nodeId, hostname: 'steady-floor', mgmtAddr: '127.0.0.1', version: 'floor' } });
setInterval(() => void send({ case: 'heartbeat', value: { nodeId, gpuMemoryUsedMb: [...memory] } }), HEARTBEAT_MS);

// --- The port-owner check: a connect, then netlink's LISTEN sockets on the port.
const libc = koffi.load('libc.so.6');
const nlSocket = libc.func('int socket(int domain, int type, int protocol)');
const nlSend = libc.func('long send(int fd, void *buf, size_t len, int flags)');
const nlRecv = libc.func('long recv(int fd, void *buf, size_t len, int flags)');
const nlClose = libc.func('int close(int fd)');
function listeners(port) {
  const found = [];
  for (const family of [2, 10]) {
    const fd = nlSocket(16, 2 | 0o2000000, 4);
    const req = Buffer.alloc(72);
    req.writeUInt32LE(72, 0);
    req.writeUInt16LE(20, 4);
    req.writeUInt16LE(0x301, 6);
    req.writeUInt32LE(1, 8);
    req.writeUInt8(family, 16);
    req.writeUInt8(6, 17);
    req.writeUInt32LE(1 << 10, 20);
    req.writeUInt16BE(port, 24);
    nlSend(fd, req, req.length, 0);
    const buf = Buffer.alloc(64 * 1024);
    for (let done = false; !done; ) {
      const n = Number(nlRecv(fd, buf, buf.length, 0x40));
      if (n <= 0) break;
      for (let off = 0; off + 16 <= n; ) {
        const len = buf.readUInt32LE(off);
        const type = buf.readUInt16LE(off + 4);
        if (type === 3 || type === 2 || len < 16) {
          done = true;
          break;
        }
        found.push(String(buf.readUInt32LE(off + 16 + 68)));
        off += (len + 3) & ~3;
      }
    }
    nlClose(fd);
  }
  return found;
}
function accepts(port) {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
function get(port, path) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end();
  });
}
/** The sum of a series' samples in Prometheus text, as read-gauge.ts reads it. */
function series(text, name) {
  let sum;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const after = line.slice(name.length);
    if (!(after.startsWith('{') || after.startsWith(' '))) continue;
    const close = after.startsWith('{') ? after.lastIndexOf('}') : -1;
    const v = Number((close === -1 ? after : after.slice(close + 1)).trim().split(/\s+/)[0]);
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}
const METRICS = ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:generation_tokens_total', 'vllm:prompt_tokens_total', 'vllm:request_success_total'];
async function probe(port) {
  try {
    if (!(await accepts(port))) return;
    listeners(port);
    const h = await get(port, '/health');
    if (h.status !== 200) return;
    const m = await get(port, '/metrics');
    for (const name of METRICS) series(m.body, name);
  } catch {
    // A failed probe costs what it costs; the floor judges nothing.
  }
}
for (const port of ports) {
  const tick = () => void probe(port).finally(() => setTimeout(tick, HEALTH_INTERVAL_MS).unref());
  setTimeout(tick, HEALTH_INTERVAL_MS).unref();
}

// --- Logs and disks.
const logs = ports.map((_, i) => join(logDir, 'shards', `s${i}.log`));
setInterval(() => void Promise.all(logs.map((l) => stat(l).catch(() => undefined))), LOG_CHECK_MS).unref();
setInterval(() => void Promise.all([statfs(logDir), statfs(stateDir)]).catch(() => undefined), DISK_MS).unref();

// --- The discovery rescan's nvidia-smi calls.
function run(args) {
  return new Promise((resolve) => {
    const c = spawn(nvidiaSmi, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LC_ALL: 'C' } });
    let out = '';
    c.stdout.setEncoding('utf8').on('data', (d) => {
      out += d;
    });
    c.on('close', () => resolve(out));
    c.on('error', () => resolve(''));
  });
}
setInterval(async () => {
  await run(['--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,driver_version,compute_cap,mig.mode.current', '--format=csv,noheader,nounits']);
  await Promise.all([run(['-L']), run(['--query-compute-apps=pid,gpu_uuid,used_memory,process_name', '--format=csv,noheader,nounits']), run(['--version'])]);
  await run(['topo', '-m']);
}, DISCOVERY_MS).unref();

while (!(await replies.next()).done);
