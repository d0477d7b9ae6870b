import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { askPeer } from '../../../src/agent/gang/ask-peer.js';
import { serveGangEndpoint } from '../../../src/agent/gang/gang-endpoint.js';
import { GangWatch } from '../../../src/agent/gang/gang-watch.js';
import { listenFdNamed, takeListenFds } from '../../../src/lib/systemd/listen-fds.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { twoRankSpec as spec, twoRankWorker } from '../../helpers/two-rank-gang.js';
import { killSquatters, NOBODY, startSquatter } from '../../helpers/squatter.js';

/*
 * Security review 4, F5: a local user binds the gang port while the agent
 * restarts. The agent used to exit 1 (restarted for ever, engines
 * unsupervised) and the peers believed the squatter's forged FAILED. Now the
 * agent starts, names the holder's uid once, takes the port when it is free;
 * the peers refuse the squatter's answer (on loopback, by its uid). With a
 * socket systemd holds (LISTEN_FDS) there is no window at all. Real sockets,
 * a real other uid (setpriv), and systemd's own socket-activation tool.
 */

afterEach(killSquatters);

/** The endpoints' retry of a held port here: 250 ms, not the agent's 2 s (GANG_PORT_RETRY_MS), so a port freed is taken within a quarter second. */
const RETRY_MS = 250;

const worker = twoRankWorker();

/** A squatter as nobody on 127.0.0.1:`port`, answering rank 1 of the gang FAILED as node-1 would. */
function squat(port: number) {
  const forged = JSON.stringify({ node: 'node-1', ranks: [{ rank: 1, shard: 'g-0-g1-r1', state: 'FAILED', running: false, stalled: false, error: 'forged by a local user' }] });
  return startSquatter(`require('http').createServer((q, s) => s.end(${JSON.stringify(forged)})).listen(${port}, '127.0.0.1', () => console.log('up'))`);
}

describe('a gang port held by another process (security review 4, F5)', () => {
  it("the agent starts anyway, names the holder's uid once, and takes the port when it is free; the holder's forged FAILED is no evidence", async () => {
    const port = await freePort();
    const s = squat(port);
    await s.up;
    const log = captureLogger('info');
    const held: unknown[] = [];
    const taken: string[] = [];
    const g = await serveGangEndpoint({
      addr: `127.0.0.1:${port}`,
      nodeId: 'node-1',
      shards: () => [worker],
      tls: () => ({ tls: undefined }),
      log: log.logger,
      onPortHeld: (m, by) => held.push([m, by]),
      onPortTaken: (m) => taken.push(m),
      portRetryMs: RETRY_MS,
    });
    onTestFinished(() => void g.server.close());
    expect(g.endpoint).toBe(`127.0.0.1:${port}`);
    expect(g.server.listening).toBe(false);
    expect(held).toEqual([[expect.stringMatching(new RegExp(`^gang_addr 127\\.0\\.0\\.1:${port} is held by uid ${NOBODY} \\(socket inode \\d+\\), not this agent`)), { uid: NOBODY }]]);
    expect(log.records.filter((r) => r.level === 50 && String(r.msg).includes(`is held by uid ${NOBODY}`))).toHaveLength(1);

    // Rank 0's node asks rank 1's endpoint: the squatter answers FAILED; its uid is not the agents', so no evidence.
    const r = await askPeer(g.endpoint, 'g-0-g1', 5_000, undefined, 'node-1');
    expect(r).toEqual({ ok: false, cause: 'unknown', why: `agent ${g.endpoint}: port ${port} is held by uid ${NOBODY}, not this agent's user (uid 0): another user's process answered, its answer is no evidence` });
    const leader = shardSnapshot('g-0-g1-r0', { replicaId: 'g-0', spec: spec(0, g.endpoint), pid: 1, servesHttp: true, logPath: '' });
    const marks: unknown[] = [];
    const w = new GangWatch({ nodeId: 'node-0', shards: () => [leader], mark: (id, f) => marks.push([id, f]), log: captureLogger('info').logger, agentGraceMs: 1, timeoutMs: 5_000 });
    for (let round = 0; round < 5; round++) await w.round();
    expect(marks).toEqual([]);

    s.child.kill('SIGKILL');
    await until(() => g.server.listening, 'the endpoint to take the port once the squatter is gone');
    expect(taken).toEqual([expect.stringMatching(new RegExp(`^gang endpoint listening on 127\\.0\\.0\\.1:${port} after the port was held for \\d+ s$`))]);
    // Said once, though tried again every RETRY_MS all along.
    expect(held).toHaveLength(1);
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, undefined, 'node-1')).toMatchObject({ ok: true, answer: { node: 'node-1', ranks: [{ state: 'READY' }] } });
  });

  it("look-alike: the port held by this agent's own user (an agent still stopping) is named as such, and its answers still count", async () => {
    const port = await freePort();
    const other = await serveGangEndpoint({ addr: `127.0.0.1:${port}`, nodeId: 'node-1', shards: () => [worker], tls: () => ({ tls: undefined }), log: captureLogger('info').logger });
    const held: string[] = [];
    const g = await serveGangEndpoint({ addr: `127.0.0.1:${port}`, nodeId: 'node-1', shards: () => [worker], tls: () => ({ tls: undefined }), log: captureLogger('info').logger, onPortHeld: (m) => held.push(m), portRetryMs: RETRY_MS });
    onTestFinished(() => {
      other.server.close();
      g.server.close();
    });
    expect(held).toEqual([expect.stringContaining(`is held by a process of this agent's user (uid 0`)]);
    expect(await askPeer(g.endpoint, 'g-0-g1', 5_000, undefined, 'node-1')).toMatchObject({ ok: true });
    other.server.close();
    await until(() => g.server.listening, 'the endpoint to take the port once the other closed it');
  });

  it('a retry stops when the endpoint is closed (agent shutdown): the port is not taken after', async () => {
    const port = await freePort();
    const s = squat(port);
    await s.up;
    const g = await serveGangEndpoint({ addr: `127.0.0.1:${port}`, nodeId: 'node-1', shards: () => [worker], tls: () => ({ tls: undefined }), log: captureLogger('info').logger, portRetryMs: RETRY_MS });
    g.server.close();
    s.child.kill('SIGKILL');
    await new Promise((r) => s.child.once('exit', r));
    // Longer than four retries (RETRY_MS): the port is free to anyone.
    await new Promise((r) => setTimeout(r, 5 * RETRY_MS));
    expect(g.server.listening).toBe(false);
    const probe = createServer();
    await new Promise<void>((resolve, reject) => probe.once('error', reject).listen(port, '127.0.0.1', resolve));
    probe.close();
  });
});

describe('socket activation (LISTEN_FDS): the gang port is held by systemd across agent restarts', () => {
  it('takes only sockets passed to this pid, removes the variables so engines are not told of them', () => {
    const env: NodeJS.ProcessEnv = { LISTEN_PID: '4242', LISTEN_FDS: '2', LISTEN_FDNAMES: 'metrics:gang', PATH: '/bin' };
    const fds = takeListenFds(env, 4242);
    expect(fds).toEqual([{ fd: 3, name: 'metrics' }, { fd: 4, name: 'gang' }]);
    expect(listenFdNamed(fds, 'gang')).toEqual({ fd: 4, name: 'gang' });
    expect(env).toEqual({ PATH: '/bin' });
    // Inherited from a parent that was activated: another pid's, nothing passed to us.
    expect(takeListenFds({ LISTEN_PID: '1', LISTEN_FDS: '1' }, 4242)).toEqual([]);
    expect(listenFdNamed([{ fd: 3, name: 'llmgw-gang.socket' }], 'gang')).toEqual({ fd: 3, name: 'llmgw-gang.socket' });
    expect(listenFdNamed([{ fd: 3, name: 'a' }, { fd: 4, name: 'b' }], 'gang')).toBeUndefined();
  });

  it.skipIf(spawnSync('systemd-socket-activate', ['--version']).status !== 0)(
    'the endpoint serves on the socket systemd-socket-activate passed, a child it spawns inherits neither it nor LISTEN_*, and a wrong address is exit 78',
    { timeout: 60_000 },
    async () => {
      const port = await freePort();
      const script = join(tmpdir(), `llmgw-gang-fd-${process.pid}-${port}.mts`);
      const src = new URL('../../../src/', import.meta.url).pathname;
      writeFileSync(
        script,
        `import { serveGangEndpoint } from '${src}agent/gang/gang-endpoint.ts';
import { listenFdNamed, takeListenFds } from '${src}lib/systemd/listen-fds.ts';
import { execFileSync } from 'node:child_process';
import { readlinkSync } from 'node:fs';
const fd = listenFdNamed(takeListenFds(), 'gang');
const passed = fd ? readlinkSync('/proc/self/fd/' + fd.fd) : 'none';
const addr = process.argv[2];
const log = { info() {}, warn() {}, error() {}, debug() {}, child() { return log; } };
try {
  const g = await serveGangEndpoint({ addr, nodeId: 'node-1', shards: () => [], tls: () => ({ tls: undefined }), log, listenFd: fd?.fd });
  const child = execFileSync('sh', ['-c', 'ls -l /proc/self/fd; env'], { encoding: 'utf8' });
  console.log(JSON.stringify({ fd: fd?.fd, endpoint: g.endpoint, listening: g.server.listening, childHasIt: child.includes(passed), childListen: child.includes('LISTEN_') }));
  g.server.close();
} catch (err) {
  console.log(JSON.stringify({ error: err.message, exitCode: err.exitCode }));
}
`,
      );
      onTestFinished(() => void spawnSync('rm', ['-f', script]));
      const root = new URL('../../../', import.meta.url).pathname;
      const run = (listen: string, addr: string) =>
        new Promise<Record<string, unknown>>((resolve, reject) => {
          // node itself, not the tsx wrapper: LISTEN_PID names the process systemd-socket-activate execs.
          const p = spawn('systemd-socket-activate', ['-l', listen, '--fdname=gang', '-E', 'PATH', process.execPath, '--import', 'tsx', script, addr], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] });
          onTestFinished(() => void (p.exitCode === null && p.kill('SIGKILL')));
          let out = '';
          p.stdout.on('data', (b: Buffer) => {
            out += b.toString();
          });
          // systemd-socket-activate starts the program at the first connection: knock until it has run.
          const knock = setInterval(() => createConnection(port), 200);
          p.once('exit', () => {
            clearInterval(knock);
            const line = out.trim().split('\n').pop() ?? '';
            try {
              resolve(JSON.parse(line) as Record<string, unknown>);
            } catch {
              reject(new Error(`no result: ${out}`));
            }
          });
        });
      expect(await run(`127.0.0.1:${port}`, `127.0.0.1:${port}`)).toEqual({ fd: 3, endpoint: `127.0.0.1:${port}`, listening: true, childHasIt: false, childListen: false });
      // ListenStream=<port> alone is every interface: a loopback gang_addr must not be served there.
      const wrong = await run(`${port}`, `127.0.0.1:${port}`);
      expect(wrong.exitCode).toBe(78);
      expect(wrong.error).toContain(`and gang_addr says 127.0.0.1:${port}: set ListenStream= to gang_addr's address and port`);
    },
  );
});

function createConnection(port: number): void {
  const s = connect({ host: '127.0.0.1', port });
  s.on('error', () => {});
  s.on('connect', () => s.destroy());
}
