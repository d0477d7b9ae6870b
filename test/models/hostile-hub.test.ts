import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { type Server, type ServerResponse, createServer } from 'node:http';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchRevision } from '../../src/models/hub-client.js';
import { isInternalHost, openHubStream, redirectRefusal } from '../../src/models/hub-stream.js';
import { agentConfigYaml } from '../helpers/agent-config-yaml.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
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
    // A hub in the rack (or a test's) may redirect within its own network.
    expect(redirectRefusal(new URL('http://10.0.0.5/x'), new URL('http://10.0.0.6/blob'))).toBeUndefined();
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
});
