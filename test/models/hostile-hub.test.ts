import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { type Server, type ServerResponse, createServer } from 'node:http';
import { join } from 'node:path';
import { createGzip, gzipSync } from 'node:zlib';
import { create } from '@bufbuild/protobuf';
import { type AgentMessage, type ModelPull, ModelPullState, PrefetchModelSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchRevision } from '../../src/models/hub-client.js';
import { isInternalHost, openHubStream, redirectRefusal } from '../../src/models/hub-stream.js';
import { agentConfigYaml } from '../helpers/agent-config-yaml.js';
import { endAgentFixture, startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { expectAgentUnharmed } from '../security/agent-unharmed.js';
import { runCli } from '../helpers/run-cli.js';

/*
 * Security review 3, S4: a hostile hub mirror, as a real local HTTP server.
 * Every answer is capped in size and time, a compressed bomb is capped as
 * what it decompresses to, what the hub says is quoted short, redirects go
 * nowhere internal, and a plaintext hub elsewhere is refused.
 */

const COMMIT = 'a'.repeat(40);
const routes = new Map<string, (res: ServerResponse) => void>();
let server: Server;
let url: string;
const held = new Set<ServerResponse>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const route = routes.get(new URL(req.url ?? '/', 'http://x').pathname);
    if (route) route(res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  for (const r of held) r.destroy();
  await new Promise<void>((r) => server.close(() => r()));
});

const hub = () => ({ endpoint: url, tokenFile: '' });

describe('a hostile hub', () => {
  it('cannot make the agent hold a huge revision description, plain or as a gzip bomb', async () => {
    routes.set('/api/models/evil/big/revision/main', (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"sha":"${COMMIT}","siblings":[],"pad":"${'x'.repeat(3 * 1024 * 1024)}"}`);
    });
    await expect(fetchRevision(hub(), 'evil/big', 'main', undefined, { timeoutMs: 10_000, maxBytes: 1024 * 1024 })).rejects.toThrow(
      "the hub's description of evil/big@main is over 1 MiB; no model's is",
    );
    // 64 MiB of zeros in some 64 KiB on the wire, sent compressed though the agent asked for identity.
    const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024));
    routes.set('/api/models/evil/gzip/revision/main', (res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(bomb);
    });
    await expect(fetchRevision(hub(), 'evil/gzip', 'main', undefined, { timeoutMs: 10_000, maxBytes: 1024 * 1024 })).rejects.toThrow('is over 1 MiB');
  });

  it('cannot hold a pull for ever: an answer that never ends is given up at its deadline, a stream that stops at its idle limit', async () => {
    routes.set('/api/models/evil/slow/revision/main', (res) => {
      held.add(res);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"sha":');
    });
    await expect(fetchRevision(hub(), 'evil/slow', 'main', undefined, { timeoutMs: 300, maxBytes: 1024 * 1024 })).rejects.toThrow(
      `the hub at ${url} did not describe evil/slow@main within 0.3s; try again later`,
    );
    routes.set('/evil/slow/resolve/file', (res) => {
      held.add(res);
      res.writeHead(200, { 'content-length': '1000' });
      res.write('only a little');
    });
    const stream = await openHubStream(`${url}/evil/slow/resolve/file`, { headers: {}, signal: AbortSignal.timeout(20_000), idleTimeoutMs: 300 });
    await expect(stream.body((_chunk, release) => release())).rejects.toThrow('no byte from 127.0.0.1');
  });

  it('quotes at most 80 characters of what it says in an error', async () => {
    routes.set('/api/models/evil/fat/revision/main', (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ sha: COMMIT, siblings: [{ rfilename: { x: 'y'.repeat(1_000_000) }, size: 1, blobId: COMMIT }] }));
    });
    const err = (await fetchRevision(hub(), 'evil/fat', 'main').then(
      () => new Error('no error'),
      (e: unknown) => e as Error,
    ));
    expect(err.message).toMatch(/^the hub's description of evil\/fat@main is not usable: file name \{"x":"y+\.\.\. is not a plain relative path$/);
    expect(err.message.length).toBeLessThan(200);
  });

  it('never sends a download to an internal address from a hub elsewhere, nor from https to http', () => {
    const cloudHub = new URL('https://hub.example.com/x');
    expect(redirectRefusal(cloudHub, new URL('http://169.254.169.254/latest/meta-data/iam/security-credentials/node-role'))).toBe('the hub redirected from https to http://169.254.169.254');
    expect(redirectRefusal(cloudHub, new URL('https://169.254.169.254/latest/meta-data/'))).toBe('the hub redirected to an internal address (169.254.169.254), which is never followed');
    expect(redirectRefusal(cloudHub, new URL('https://127.0.0.1:18998/x'))).toMatch(/internal address/);
    expect(redirectRefusal(cloudHub, new URL('https://[::1]/x'))).toMatch(/internal address/);
    expect(redirectRefusal(cloudHub, new URL('https://cdn-lfs.example.org/blob'))).toBeUndefined();
    // A hub in the rack may redirect within its own network only to the hosts the operator lists (security review 4, F7).
    expect(redirectRefusal(new URL('http://10.0.0.5/x'), new URL('http://10.0.0.6/blob'))).toMatch(/models\.hub\.redirect_hosts does not list/);
    expect(redirectRefusal(new URL('http://10.0.0.5/x'), new URL('http://10.0.0.6/blob'), ['10.0.0.6'])).toBeUndefined();
    expect(['10.1.2.3', '172.20.0.1', '192.168.1.1', '100.64.0.1', 'localhost', 'fe80::1', 'fd00::1'].every(isInternalHost)).toBe(true);
    expect(['8.8.8.8', '172.32.0.1', 'huggingface.co'].some(isInternalHost)).toBe(false);
  });

  it('is refused as a plaintext hub elsewhere at the agent\'s start (exit 78): its token would travel readable and its bytes be anyone\'s', async () => {
    const dirs = tempAgentDirs('llmgw-hostile-hub-');
    mkdirSync(dirs.root, { recursive: true });
    const config = join(dirs.root, 'agent.yaml');
    writeFileSync(config, agentConfigYaml({ server: 'http://127.0.0.1:1', dirs, extraYaml: `models:\n  cache_dir: ${join(dirs.root, 'models')}\n  budget: 1GiB\n  hub:\n    endpoint: http://10.1.2.3:8080\n` }));
    const r = await runCli(['agent', 'run', '--config', config]);
    expect(r.exitCode).toBe(78);
    expect(r.stderr).toContain('models.hub.endpoint http://10.1.2.3:8080 is plaintext http:// to a host that is not loopback');
  });

  it('says at the agent\'s start when the hub token may be read by users other than its owner', async () => {
    const dirs = tempAgentDirs('llmgw-token-mode-');
    mkdirSync(dirs.root, { recursive: true });
    const token = join(dirs.root, 'hf-token');
    writeFileSync(token, 'hf_secret\n', { mode: 0o644 });
    chmodSync(token, 0o644);
    const agent = startAgentProcess({ server: 'http://127.0.0.1:1', dirs, extraYaml: `models:\n  cache_dir: ${join(dirs.root, 'models')}\n  budget: 1GiB\n  hub:\n    token_file: ${token}\n` });
    await until(() => agent.logs().some((l) => l.msg === 'models.hub.token_file may be read by users other than its owner; chmod 0600 it'), 'the token warning', 20_000);
    expect(agent.logs().find((l) => String(l.msg).startsWith('models.hub.token_file'))).toMatchObject({ file: token, mode: '644' });
  });

  it('leaves the real agent under its memory bound with its heartbeats on time while PrefetchModels meet a huge description, a gzip bomb and a body that never ends', { timeout: 120_000 }, async () => {
    // 512 MiB of zeros as some 500 KiB of gzip, made as a stream: the review's 2 MB gzip took the agent to 2.1 GB.
    const bomb = await new Promise<Buffer>((resolve, reject) => {
      const gz = createGzip({ level: 1 });
      const parts: Buffer[] = [];
      gz.on('data', (b: Buffer) => parts.push(b)).on('end', () => resolve(Buffer.concat(parts))).on('error', reject);
      const zeros = Buffer.alloc(1024 * 1024);
      let left = 512;
      const pump = () => {
        while (left > 0) {
          left--;
          if (!gz.write(zeros)) return void gz.once('drain', pump);
        }
        gz.end();
      };
      pump();
    });
    routes.set('/api/models/evil/agent-bomb/revision/main', (res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      res.end(bomb);
    });
    routes.set('/api/models/evil/agent-big/revision/main', (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"sha":"${COMMIT}","siblings":[],"pad":"${'x'.repeat(64 * 1024 * 1024)}"}`);
    });
    routes.set('/api/models/evil/agent-slow/revision/main', (res) => {
      held.add(res);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"sha":');
    });
    const plane = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-hostile-hub-agent-');
    const cacheDir = join(dirs.root, 'models');
    mkdirSync(cacheDir, { recursive: true });
    const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
    const agent = startAgentProcess({ server: plane.url, dirs, extraYaml: `models:\n  cache_dir: ${cacheDir}\n  budget: 1GiB\n  hub:\n    endpoint: ${url}\n` });
    try {
      await registered;
      // Every gap between heartbeats (200 ms apart) while the hostile pulls run.
      let sampling = true;
      const gaps: number[] = [];
      const sampler = (async () => {
        let last = Date.now();
        while (sampling) {
          await plane.cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat', 30_000);
          gaps.push(Date.now() - last);
          last = Date.now();
        }
      })();
      // A failure above closes the plane under the sampler's wait: the assertion that failed is the report.
      sampler.catch(() => undefined);
      const failedPull = (repo: string) => (m: AgentMessage) => m.msg.case === 'modelPull' && m.msg.value.repo === repo && m.msg.value.state === ModelPullState.FAILED;
      const outcomes = ['evil/agent-bomb', 'evil/agent-big'].map((repo) => plane.cp.waitFor('node-a', failedPull(repo), 60_000));
      const slowStarted = until(() => held.size > 0, 'the slow description asked for', 20_000);
      for (const repo of ['evil/agent-bomb', 'evil/agent-big', 'evil/agent-slow']) {
        plane.cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo, revision: 'main' }) });
      }
      const [bombed, big] = (await Promise.all(outcomes)).map((m) => m.msg.value as ModelPull);
      // The agent caps a hub's description at 16 MiB (hub-client.ts), decompressed.
      expect(bombed?.error).toBe("the hub's description of evil/agent-bomb@main is over 16 MiB; no model's is");
      expect(big?.error).toBe("the hub's description of evil/agent-big@main is over 16 MiB; no model's is");
      await slowStarted;
      // Two seconds more of heartbeats with the slow description still held.
      const until2s = Date.now() + 2000;
      await until(() => Date.now() >= until2s && gaps.length >= 5, 'heartbeats during the held pull', 30_000);
      sampling = false;
      await sampler;
      if (process.env.SEC_DEBUG) console.log(`heartbeat gaps: max ${Math.max(...gaps)} ms over ${gaps.length}`);
      // The review's pattern held the loop 36 s; a heartbeat every 200 ms may slip on a busy machine, never by seconds.
      expect(Math.max(...gaps), `heartbeat gaps ${gaps.join(', ')} ms`).toBeLessThan(5_000);
      expectAgentUnharmed(agent.pid);
    } finally {
      await endAgentFixture({ agent, cp: plane, dirs });
    }
  });
});
