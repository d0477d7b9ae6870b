import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { type Server, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LISTEN_POLL_MS, LISTENING_PORTS_TTL_MS, portOwnerCheck, untilPortListed } from '../../../../src/agent/supervisor/probes/port-owner-check.js';
import { freePort, until } from '../../../helpers/engine-processes.js';

const servers: Server[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) s.close();
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      process.kill(-(c.pid as number), 'SIGKILL');
      await once(c, 'exit');
    }
  }
});

const isRoot = process.geteuid?.() === 0;

/**
 * An "engine": a process group of its own whose leader spawns a child that
 * listens on `port` once told to (a line on stdin), as a vLLM API server
 * process below its launcher does. Resolves with the leader's pid (= pgid).
 */
async function engineGroup(port: number): Promise<{ pid: number; listen: () => Promise<void>; closeListener: () => Promise<void> }> {
  const listener = `let s;require('readline').createInterface({input:process.stdin}).on('line',(l)=>{if(l==='go')s=require('net').createServer().listen(${port},'0.0.0.0',()=>console.log('up'));else s.close(()=>console.log('closed'))});setInterval(()=>{},1000)`;
  const leader = `const c=require('child_process').spawn(process.execPath,['-e',${JSON.stringify(listener)}],{stdio:['pipe','inherit','inherit']});process.stdin.pipe(c.stdin);console.log('started');setInterval(()=>{},1000)`;
  const child = spawn(process.execPath, ['-e', leader], { detached: true, stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  const lines: string[] = [];
  child.stdout?.on('data', (b: Buffer) => lines.push(...b.toString().trim().split('\n')));
  const seen = async (line: string) => {
    while (!lines.includes(line)) await once(child.stdout as NodeJS.ReadableStream, 'data');
  };
  await seen('started');
  return {
    pid: child.pid as number,
    listen: async () => {
      child.stdin?.write('go\n');
      await seen('up');
    },
    closeListener: async () => {
      child.stdin?.write('close\n');
      await seen('closed');
    },
  };
}

describe('portOwnerCheck', () => {
  it('says nobody listens, then the engine, when a process of its group binds the port', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
    expect(await check()).toEqual({ owner: 'nobody' });
    await engine.listen();
    expect(await check()).toEqual({ owner: 'engine' });
  });

  it('names the pid and uid of another process holding the port, and never calls it the engine', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const squatter = createServer();
    servers.push(squatter);
    await new Promise<void>((r) => squatter.listen(port, '127.0.0.1', r));
    const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
    const uid = process.geteuid?.() ?? 0;
    expect(await check()).toEqual({ owner: 'other', pid: process.pid, uid, reason: `port ${port} held by another process (pid ${process.pid}, uid ${uid})` });
    // The same sockets, the same verdict (from the cache); a closed squatter leaves the port to nobody.
    expect((await check()).owner).toBe('other');
    await new Promise<void>((r) => squatter.close(() => r()));
    await new Promise((r) => setTimeout(r, 30));
    expect(await check()).toEqual({ owner: 'nobody' });
  });

  it.skipIf(!isRoot)('names a squatter running as nobody with uid 65534', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const squatter = spawn(
      'setpriv',
      ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', `require('net').createServer().listen(${port},'127.0.0.1',()=>console.log('up'))`],
      { detached: true, stdio: ['ignore', 'pipe', 'inherit'], cwd: '/' },
    );
    children.push(squatter);
    await once(squatter.stdout as NodeJS.ReadableStream, 'data');
    const verdict = await portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid })();
    expect(verdict).toEqual({ owner: 'other', pid: squatter.pid, uid: 65534, reason: `port ${port} held by another process (pid ${squatter.pid}, uid 65534)` });
  });

  it('calls the port squatted when a stranger listens beside the engine on another address', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const squatter = createServer();
    servers.push(squatter);
    // [::1]:P and 0.0.0.0:P can both be bound; which one a probe reaches depends on the address it dials.
    await new Promise<void>((r) => squatter.listen({ port, host: '::1', ipv6Only: true }, r));
    await engine.listen();
    expect((await portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid })()).owner).toBe('other');
  });

  it('judges afresh whoever binds the port after the engine let it go, within the time a verdict is kept', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
    await engine.listen();
    expect(await check()).toEqual({ owner: 'engine' });
    process.kill(-engine.pid, 'SIGKILL');
    await until(async () => (await check()).owner === 'nobody', 'the port closed');
    const squatter = createServer();
    servers.push(squatter);
    await new Promise<void>((r) => squatter.listen(port, '127.0.0.1', r));
    expect((await check()).owner).toBe('other');
  });

  it('sees a squatter at the next check when a READY engine closes its own listener and the squatter binds before any check saw the port free', async () => {
    const port = await freePort();
    const engine = await engineGroup(port);
    const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
    await engine.listen();
    expect(await check()).toEqual({ owner: 'engine' });
    // The engine lives on without its listener (a crashed HTTP thread); a stranger takes the port at once.
    await engine.closeListener();
    const squatter = createServer();
    servers.push(squatter);
    await new Promise<void>((r) => squatter.listen(port, '127.0.0.1', r));
    expect(await check()).toMatchObject({ owner: 'other', pid: process.pid });
  });

  describe('asked by a readiness wait (loading: one dump of every listening port, no connect)', () => {
    /** Past the shared dump's life, so the next check reads the kernel again. */
    const pastTtl = () => new Promise((r) => setTimeout(r, LISTENING_PORTS_TTL_MS * 3));

    it('says nobody while the port is closed, then the engine once a process of its group binds it', async () => {
      const port = await freePort();
      const engine = await engineGroup(port);
      const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
      expect(await check({ loading: true })).toEqual({ owner: 'nobody' });
      await engine.listen();
      await pastTtl();
      expect(await check({ loading: true })).toEqual({ owner: 'engine' });
    });

    it('still names a squatter: a listed port goes on to the full check', async () => {
      const port = await freePort();
      const engine = await engineGroup(port);
      const squatter = createServer();
      servers.push(squatter);
      await new Promise<void>((r) => squatter.listen(port, '127.0.0.1', r));
      await pastTtl();
      expect(await portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid })({ loading: true })).toMatchObject({ owner: 'other', pid: process.pid });
    });

    it('ends a wait for the port soon after it is bound, not at the wait\'s own limit; ends it at the limit or on abort otherwise', async () => {
      const port = await freePort();
      const other = await freePort();
      const ac = new AbortController();
      // Bound while the waits wait: the port's ends within polls, the other port's at its limit.
      const server = createServer();
      servers.push(server);
      const t0 = performance.now();
      const bound = new Promise<number>((r) => setTimeout(() => server.listen(port, '127.0.0.1', () => r(performance.now())), 200));
      const ended = untilPortListed(port, 20_000, ac.signal).then(() => performance.now());
      const otherEnded = untilPortListed(other, 1_000, ac.signal).then(() => performance.now());
      const [boundAt, endedAt] = await Promise.all([bound, ended]);
      expect(endedAt).toBeGreaterThanOrEqual(boundAt);
      // A safety net far from both the poll (20 ms) and the 20 s limit.
      expect(endedAt - boundAt).toBeLessThan(10_000);
      expect((await otherEnded) - t0).toBeGreaterThanOrEqual(990);
      const aborted = untilPortListed(other, 20_000, ac.signal).then(() => performance.now());
      const abortAt = performance.now();
      ac.abort();
      expect((await aborted) - abortAt).toBeLessThan(10_000);
      expect(LISTEN_POLL_MS).toBeLessThan(50);
    });

    it('gives each check its port\'s wait (a readiness wait pauses on it while nothing listens)', async () => {
      const port = await freePort();
      const engine = await engineGroup(port);
      const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
      const ac = new AbortController();
      const waited = check.untilListed?.(20_000, ac.signal);
      await engine.listen();
      await waited;
      expect(await check({ loading: true })).toEqual({ owner: 'engine' });
    });

    it('says nobody, as the connect did, when the only listener is on an address the probes do not dial', async () => {
      const port = await freePort();
      const engine = await engineGroup(port);
      const elsewhere = createServer();
      servers.push(elsewhere);
      await new Promise<void>((r) => elsewhere.listen({ port, host: '::1', ipv6Only: true }, r));
      await pastTtl();
      const check = portOwnerCheck({ port, pid: engine.pid, pgid: engine.pid });
      expect(await check({ loading: true })).toEqual({ owner: 'nobody' });
      expect(await check()).toEqual({ owner: 'nobody' });
    });
  });
});
