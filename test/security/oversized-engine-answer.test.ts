import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpGet, METRICS_BODY_MAX_BYTES, PROBE_BODY_MAX_BYTES, probeReady } from '../../src/agent/supervisor/probes/http-probe.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { simStart } from '../helpers/sim-shards.js';
import { type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';
import { expectAgentUnharmed } from './agent-unharmed.js';

/*
 * Finding 2 of the security review, the crash half: whoever binds a loading
 * engine's port answers the agent's probes. A 600 MB answer made the root
 * agent die with ERR_STRING_TOO_LONG. The answers here are streamed, never
 * allocated, and the server counts what it managed to send.
 */

const MB = 1024 * 1024;
const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-probe-'));
const servers: Server[] = [];
let cp: HostileControlPlane;

beforeAll(async () => {
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

/** An HTTP server answering every request 200 with `totalBytes` of JSON-ish bytes, chunked (no Content-Length to check). */
async function floodingServer(totalBytes: number, port = 0): Promise<{ url: string; port: number; sent: () => number }> {
  let sent = 0;
  const chunk = Buffer.alloc(MB, 0x61);
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    let left = totalBytes;
    const pump = () => {
      while (left > 0 && !res.destroyed) {
        left -= chunk.length;
        sent += chunk.length;
        if (!res.write(chunk)) {
          res.once('drain', pump);
          return;
        }
      }
      res.end();
    };
    req.socket.on('error', () => {});
    pump();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const bound = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${bound}`, port: bound, sent: () => sent };
}

describe('answers on an engine port are size-capped', () => {
  it('httpGet refuses a 600 MB answer as an error after reading at most its cap', async () => {
    const s = await floodingServer(600 * MB);
    await expect(httpGet(`${s.url}/health`, { timeoutMs: 20_000 })).rejects.toThrow(`at most ${PROBE_BODY_MAX_BYTES} are read`);
    await expect(httpGet(`${s.url}/metrics`, { timeoutMs: 20_000 })).rejects.toThrow(`at most ${METRICS_BODY_MAX_BYTES} are read`);
    const r = await probeReady(s.url, 'm', { timeoutMs: 20_000 });
    expect(r).toEqual({ ok: false, loading: false, reason: `GET /health: the answer is over ${PROBE_BODY_MAX_BYTES} bytes; at most ${PROBE_BODY_MAX_BYTES} are read` });
    // Socket buffers hold a few MB in flight; 600 MB were never transferred.
    expect(s.sent()).toBeLessThan(100 * MB);
  });

  it('refuses an answer whose Content-Length is over the cap without reading it', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-length': String(600 * MB) });
      res.write('x');
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/models`;
    await expect(httpGet(url, { timeoutMs: 20_000 })).rejects.toThrow(`the answer is ${600 * MB} bytes; at most ${PROBE_BODY_MAX_BYTES} are read`);
  });

  it('keeps the real agent alive, and the shard not READY, when a squatter on a loading shard\'s port answers 600 MB', { timeout: 120_000 }, async () => {
    const dirs = agentDirs(join(root, 'agent'));
    cleanUpEnginesAfterTest(dirs);
    const agent = startAgentProcess({ server: cp.url, dirs, nodeId: 'probe-node' });
    await cp.waitFor((m) => m.msg.case === 'register');
    // A free port outside the ephemeral range, which the agent refuses as an http_port.
    const port = await freePort();

    cp.send({ case: 'start', value: simStart('squatted', port, { args: ['--load-time', '120s'] }) });
    await cp.waitFor((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted' && m.msg.value.state === ShardState.STARTING);
    const squatter = await floodingServer(600 * MB, port);

    // The port is not the engine's (port-squatting.test.ts): the squatter is
    // never asked, so its 600 MB never reach the agent. Many readiness ticks later:
    await new Promise((r) => setTimeout(r, 5000));
    expect(squatter.sent()).toBe(0);
    expectAgentUnharmed(agent.pid);
    const statuses = cp.received.filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'squatted');
    expect(statuses.map((m) => (m.msg.case === 'shard' ? ShardState[m.msg.value.state] : ''))).not.toContain('READY');
    expect(agent.logs().some((r) => /ERR_STRING_TOO_LONG|uncaught/i.test(JSON.stringify(r)))).toBe(false);
    await agent.stop();
  });
});
