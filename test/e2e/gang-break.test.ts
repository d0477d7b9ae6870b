import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'vitest';
import { type AgentMessage, ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { ctlShard } from '../helpers/gang-cluster.js';
import { runCli } from '../helpers/run-cli.js';
import { gangDeployment } from '../helpers/gang-deployment.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 40: a replica spanning two nodes is one gang. Two real agents on
 * this machine (own node ids, state dirs, sockets, gang endpoints) and the
 * reference control plane; the sim ranks hold a rendezvous as NCCL ranks
 * do and never exit when a peer goes (sim-rendezvous.ts), so whatever ends
 * them is the agents' and the control plane's doing. Bounds are safety
 * nets; the time from a death to the gang stopped is bench 15's figure.
 *
 * The tests run side by side (describe.concurrent), each on a cluster of its
 * own (control plane, agents, engines, port range) that ends with it (its
 * context's onTestFinished), and each takes expect from its context: vitest
 * tracks no concurrent test in its globals.
 */

const TEST_TIMEOUT_MS = 120_000;
const WAIT_MS = 30_000;

interface Cluster {
  cp: StartedControlPlane;
  agents: Record<'node-a' | 'node-b', AgentProcess>;
  dirs: Record<'node-a' | 'node-b', AgentDirs>;
  /** Pid of each rank's engine, once READY. */
  pids: Record<'node-a' | 'node-b', number>;
}

const shard = (m: AgentMessage) => (m.msg.case === 'shard' ? m.msg.value : undefined);
const isState = (id: string, state: ShardState) => (m: AgentMessage) => shard(m)?.shardId === id && shard(m)?.state === state;

async function startCluster({ onTestFinished }: TestContext, opts: { deploymentArgs?: string[]; supervisor?: string[]; port?: number } = {}): Promise<Cluster> {
  const first = 24_000 + Math.floor(Math.random() * 300) * 20;
  const cp = await startControlPlane({ deployment: gangDeployment(opts.deploymentArgs), retryBackoffMs: 1_000, maxRetryBackoffMs: 2_000, portRange: [first, first + 19], port: opts.port ?? 0, onEnd: onTestFinished });
  const root = mkdtempSync(join(tmpdir(), 'llmgw-gang-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  const dirs = { 'node-a': agentDirs(join(root, 'a')), 'node-b': agentDirs(join(root, 'b')) };
  for (const d of Object.values(dirs)) cleanUpEnginesAfterTest(d, onTestFinished);
  const ready = {
    'node-a': cp.cp.waitFor('node-a', isState('gang-0-g1-r0', ShardState.READY), WAIT_MS),
    'node-b': cp.cp.waitFor('node-b', isState('gang-0-g1-r1', ShardState.READY), WAIT_MS),
  };
  const agent = (nodeId: 'node-a' | 'node-b') =>
    startAgentProcess({ server: cp.url, dirs: dirs[nodeId], nodeId, heartbeat: '500ms', extraYaml: 'gang_addr: 127.0.0.1:0\n', supervisor: opts.supervisor }, onTestFinished);
  const agents = { 'node-a': agent('node-a'), 'node-b': agent('node-b') };
  const pids = { 'node-a': (shard(await ready['node-a']) as { pid: number }).pid, 'node-b': (shard(await ready['node-b']) as { pid: number }).pid };
  return { cp, agents, dirs, pids };
}

describe.concurrent('a multi-node replica is one gang', () => {
  it("the leader's engine SIGKILLed: the worker rank is fenced through the control plane, and the whole gang placed again", { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const c = await startCluster(ctx);
    const workerStopped = c.cp.cp.waitFor('node-b', isState('gang-0-g1-r1', ShardState.STOPPED), WAIT_MS);
    // On either node: the next placement goes by each node's measured time to READY (issue 41), and a worker's is shorter.
    const readyOnEither = (id: string) => Promise.any((['node-a', 'node-b'] as const).map((n) => c.cp.cp.waitFor(n, isState(id, ShardState.READY), WAIT_MS)));
    const nextReady = Promise.all([readyOnEither('gang-0-g2-r0'), readyOnEither('gang-0-g2-r1')]);
    process.kill(c.pids['node-a'], 'SIGKILL');
    await workerStopped;
    await until(() => !isRunning(c.pids['node-b']), 'the worker engine to be gone', WAIT_MS);
    // Fenced: a hard stop of every rank, not a drain of rank 0 first (there is no rank 0 left).
    await nextReady;
  });

  it("the leader's whole node gone (agent and engine): the worker's agent reports the gang broken, naming rank 0, and the control plane fences it", { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const { expect } = ctx;
    const c = await startCluster(ctx);
    const broken = c.cp.cp.waitFor('node-b', (m) => shard(m)?.shardId === 'gang-0-g1-r1' && shard(m)?.gangBreak !== undefined, WAIT_MS);
    const workerStopped = c.cp.cp.waitFor('node-b', isState('gang-0-g1-r1', ShardState.STOPPED), WAIT_MS);
    c.agents['node-a'].kill('SIGKILL');
    await c.agents['node-a'].exited;
    process.kill(c.pids['node-a'], 'SIGKILL');
    const st = shard(await broken);
    expect(st?.state).toBe(ShardState.UNHEALTHY);
    expect(st?.gangBreak).toMatchObject({ rank: 0, nodeId: 'node-a', shardId: 'gang-0-g1-r0', stalled: false });
    expect(st?.gangBreak?.reason).toMatch(/^rank 0 on node-a unreachable since \S+ \(agent 127\.0\.0\.1:\d+: connect ECONNREFUSED; rendezvous 127\.0\.0\.1:\d+: connect ECONNREFUSED\)$/);
    expect(st?.error).toBe(`gang broken: ${st?.gangBreak?.reason}`);
    await workerStopped;
    await until(() => !isRunning(c.pids['node-b']), 'the worker engine to be gone', WAIT_MS);
  });

  it("a worker rank SIGKILLed: the leader is fenced", { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const c = await startCluster(ctx);
    const leaderStopped = c.cp.cp.waitFor('node-a', isState('gang-0-g1-r0', ShardState.STOPPED), WAIT_MS);
    process.kill(c.pids['node-b'], 'SIGKILL');
    await leaderStopped;
    await until(() => !isRunning(c.pids['node-a']), 'the leader engine to be gone', WAIT_MS);
  });

  it('the control plane down during the break: the worker sees it on the node, and the next control plane fences it from Register', { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const { expect } = ctx;
    const port = await freePort();
    const c = await startCluster(ctx, { port });
    await c.cp.close();
    process.kill(c.pids['node-a'], 'SIGKILL');
    // On the node, with no control plane: the leader's agent answers FAILED to the worker's.
    // UNHEALTHY as soon as the leader's engine is gone ("… engine ended …; its agent is still telling how"), then named
    // by its state once the leader's agent has told its death (after asking its own peers who went first).
    const told = (s?: { state?: string; error?: string }) => s?.state === 'SHARD_STATE_UNHEALTHY' && /is FAILED/.test(s.error ?? '');
    await until(async () => told(await ctlShard(c.dirs['node-b'], 'gang-0-g1-r1')), 'the worker to be UNHEALTHY on its node, naming the leader FAILED', WAIT_MS);
    const seen = await ctlShard(c.dirs['node-b'], 'gang-0-g1-r1');
    expect(seen?.error).toMatch(/^gang broken: rank 0 on node-a is FAILED: engine was killed by SIGKILL/);
    expect(seen?.gang).toBe('rank 1 of 2 of gang gang-0-g1: rank 0 on node-a, rank 1 on node-b');
    // Placed on its GPU's CPUs (the fixture's GPU 0: 0-55,112-167, those online here), as the engine's own affinity shows.
    const cpus = /CPUs (\S+)/.exec(seen?.note ?? '')?.[1];
    expect(seen?.note).toMatch(/^placed: (NUMA node 0|no NUMA binding \(NUMA node 0 is not online here\)), CPUs /);
    expect(readFileSync(`/proc/${c.pids['node-b']}/status`, 'utf8')).toContain(`Cpus_allowed_list:\t${cpus}\n`);
    expect(isRunning(c.pids['node-b'])).toBe(true);
    // The next control plane learns it from Register and fences the worker.
    const next = await startControlPlane({ deployment: gangDeployment(), retryBackoffMs: 60_000, port, onEnd: ctx.onTestFinished });
    const reg = await next.cp.waitFor('node-b', (m) => m.msg.case === 'register', WAIT_MS);
    const running = reg.msg.case === 'register' ? reg.msg.value.runningShards.find((r) => r.shardId === 'gang-0-g1-r1') : undefined;
    expect(running?.gangBreak?.reason).toMatch(/^rank 0 on node-a is FAILED/);
    await until(() => !isRunning(c.pids['node-b']), 'the worker engine to be fenced', WAIT_MS);
  });

  it("a worker SIGKILLed with the control plane away: the leader's agent sees it on the node, naming rank 1, and keeps the engine for the control plane", { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const { expect } = ctx;
    const c = await startCluster(ctx);
    await c.cp.close();
    process.kill(c.pids['node-b'], 'SIGKILL');
    // UNHEALTHY as soon as the worker's engine is gone ("… engine ended …; its agent is still telling how"), then
    // named by its state at the next round once the worker's agent has told its death, as in the test above.
    const told = (s?: { state?: string; error?: string }) => s?.state === 'SHARD_STATE_UNHEALTHY' && /is FAILED/.test(s.error ?? '');
    await until(async () => told(await ctlShard(c.dirs['node-a'], 'gang-0-g1-r0')), 'the leader to be UNHEALTHY on its node, naming the worker FAILED', WAIT_MS);
    expect((await ctlShard(c.dirs['node-a'], 'gang-0-g1-r0'))?.error).toMatch(/^gang broken: rank 1 on node-b is FAILED: engine was killed by SIGKILL/);
    expect(isRunning(c.pids['node-a'])).toBe(true);
  });

  it('a stalled leader: every rank of the gang is reported stalled, and nothing is fenced', { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
    const { expect } = ctx;
    const c = await startCluster(ctx, { deploymentArgs: ['--stall-after', '1s', '--token-latency', '50ms'], supervisor: ['stall_timeout: 2s'] });
    const stalled = c.cp.cp.waitFor('node-b', (m) => shard(m)?.shardId === 'gang-0-g1-r1' && shard(m)?.gangBreak?.stalled === true, WAIT_MS);
    // A request in flight that makes no progress: what the stall detector needs.
    const port = await ctlHttpPort(c.dirs['node-a'], 'gang-0-g1-r0');
    expect(port).toBeGreaterThan(0);
    const url = `http://127.0.0.1:${port}`;
    const req = fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gang', prompt: 'hi', max_tokens: 1000 }), signal: AbortSignal.timeout(WAIT_MS) }).catch(() => undefined);
    const st = shard(await stalled);
    expect(st?.state).toBe(ShardState.UNHEALTHY);
    expect(st?.error).toMatch(/^gang stalled: rank 0 on node-a stalled: /);
    // Reported, not fenced: both engines still run.
    expect([isRunning(c.pids['node-a']), isRunning(c.pids['node-b'])]).toEqual([true, true]);
    void req;
  });
});

async function ctlHttpPort(dirs: AgentDirs, shardId: string): Promise<number | undefined> {
  const r = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
  const shards = (JSON.parse(r.stdout) as { shards?: { shardId: string; httpPort?: number }[] }).shards ?? [];
  return shards.find((x) => x.shardId === shardId)?.httpPort;
}
