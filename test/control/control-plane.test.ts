import { setTimeout as sleep } from 'node:timers/promises';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { ControlPlane } from '../../src/control/control-plane.js';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { MIN_LIVENESS_MS } from '../../src/control/node-session.js';
import type { ReplicaView } from '../../src/control/replica-view.js';
import { type ControlMessage, GpuEventKind, GpuEventSchema, ShardState, ShardStatusSchema, type StartShard, type StopShard } from '../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { FakeAgent, fixtureInventory, isStart, isStop } from '../helpers/fake-agent.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

const TINY = `
profiles:
  tiny:
    engine: sim
    model: sim/tiny
    served_model_name: tiny
    args: [--load-time, 1s]
    env: { SIM_SEED: "7" }
    startup_timeout: STARTUP
replicas:
  - name: tiny
    profile: tiny
    count: 1
`;

const tiny = (startup = '10m') => parseDeployment(TINY.replace('STARTUP', startup), 'tiny.yaml');

const TWO_NODE = parseDeployment(
  `
profiles:
  big:
    engine: sim
    model: sim/big
    tensor_parallel_size: 1
    pipeline_parallel_size: 2
replicas:
  - name: big
    profile: big
    nnodes: 2
    gpus_per_shard: 1
`,
  'two-node.yaml',
);

/** A fake agent whose stream is dropped when the test ends, pass or fail. */
function agent(opts: ConstructorParameters<typeof FakeAgent>[0]): FakeAgent {
  const a = new FakeAgent(opts);
  onTestFinished(() => a.kill());
  return a;
}

const startOf = (m: ControlMessage) => m.msg.value as StartShard;
const stopOf = (m: ControlMessage) => m.msg.value as StopShard;

function report(a: FakeAgent, start: StartShard, state: ShardState, extra: { error?: string; exitCode?: number } = {}): void {
  a.send({
    case: 'shard',
    value: create(ShardStatusSchema, { nodeId: a.nodeId, replicaId: start.replicaId, shardId: start.shardId, state, ...extra }),
  });
}

/** Waits until the control plane has handled a ShardStatus for shardId in `state`. */
function handled(cp: ControlPlane, nodeId: string, shardId: string, state: ShardState) {
  return cp.waitFor(nodeId, (m) => m.msg.case === 'shard' && m.msg.value.shardId === shardId && m.msg.value.state === state, 15_000);
}

describe('ControlPlane', () => {
  it.each(['connect', 'grpc'] as const)('sends StartShard with GPU indices, port and profile when a node registers (%s)', async (protocol) => {
    const { cp, url } = await startControlPlane({ deployment: tiny('90s'), portRange: [19100, 19109] });
    const a = agent({ baseUrl: url, nodeId: 'node-a', protocol, gpus: 2 });
    const start = startOf(await a.waitFor(isStart));
    expect(start.shardId).toBe('tiny-0-g1-r0');
    expect(start.replicaId).toBe('tiny-0');
    expect(start.rank).toBe(0);
    expect(start.nnodes).toBe(1);
    expect(start.gpuIndices).toEqual([0]);
    expect(start.httpPort).toBeGreaterThanOrEqual(19100);
    expect(start.httpPort).toBeLessThanOrEqual(19109);
    expect(start.profile).toMatchObject({ name: 'tiny', engine: 'sim', model: 'sim/tiny', servedModelName: 'tiny', args: ['--load-time', '1s'], env: { SIM_SEED: '7' } });
    expect(start.profile?.startupTimeout?.seconds).toBe(90n);
    // The register itself is acknowledged first.
    expect(a.received[0]?.msg).toMatchObject({ case: 'ack', value: { ok: true, messageId: 1n } });
    expect(cp.nodes()[0]).toMatchObject({ id: 'node-a', connected: true, freeGpus: [1] });
  });

  it('marks the replica READY with its URL when its shard reports READY', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny() });
    const ready = new Promise<ReplicaView>((resolve) => cp.once('replica-ready', resolve));
    const a = agent({ baseUrl: url, nodeId: 'node-a', mgmtAddr: '127.0.0.1' });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.STARTING);
    report(a, start, ShardState.READY);
    const view = await ready;
    expect(view).toMatchObject({ id: 'tiny-0', phase: 'ready', url: `http://127.0.0.1:${start.httpPort}` });
    expect(cp.replicas()[0]?.shards[0]).toMatchObject({ shardId: start.shardId, nodeId: 'node-a', stateName: 'READY', adopted: false });
  });

  it("calls a replica drained on its node 'draining', not 'starting', and starts nothing for it (walkthrough 3)", async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny() });
    const a = agent({ baseUrl: url, nodeId: 'node-a' });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.READY);
    await handled(cp, 'node-a', start.shardId, ShardState.READY);
    report(a, start, ShardState.DRAINING);
    await handled(cp, 'node-a', start.shardId, ShardState.DRAINING);
    expect(cp.replicas()[0]).toMatchObject({ phase: 'draining', generation: 1, shards: [{ shardId: start.shardId, stateName: 'DRAINING' }] });
    // Its drain cancelled: ready again.
    report(a, start, ShardState.READY);
    await handled(cp, 'node-a', start.shardId, ShardState.READY);
    expect(cp.replicas()[0]?.phase).toBe('ready');
    expect(a.received.filter(isStart)).toHaveLength(1);
  });

  it('keeps a shard and starts nothing when its node reconnects with it in running_shards', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny() });
    const first = agent({ baseUrl: url, nodeId: 'node-a' });
    const start = startOf(await first.waitFor(isStart));
    report(first, start, ShardState.READY);
    await handled(cp, 'node-a', start.shardId, ShardState.READY);
    await first.kill();

    const again = agent({ baseUrl: url, nodeId: 'node-a', runningShards: [runningFrom(start, ShardState.READY)] });
    await again.sync();
    expect(again.received.filter((m) => isStart(m) || isStop(m))).toEqual([]);
    expect(cp.replicas()[0]).toMatchObject({ phase: 'ready', generation: 1, shards: [{ shardId: start.shardId, stateName: 'READY' }] });
  });

  it('adopts the shards nodes report after its own restart and restarts none of them', async () => {
    const before = await startControlPlane({ deployment: tiny() });
    const a = agent({ baseUrl: before.url, nodeId: 'node-a' });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.READY);
    await handled(before.cp, 'node-a', start.shardId, ShardState.READY);
    await before.close();

    // A new instance on the same deployment, with the default settle delay:
    // it must learn what runs from the node, not place a second copy.
    const after = await startControlPlane({ deployment: tiny(), placementDelayMs: 50 });
    const ready = new Promise<ReplicaView>((resolve) => after.cp.once('replica-ready', resolve));
    const back = agent({ baseUrl: after.url, nodeId: 'node-a', runningShards: [runningFrom(start, ShardState.READY)] });
    expect((await ready).shards).toMatchObject([{ shardId: start.shardId, adopted: true, nodeId: 'node-a', gpuIndices: [...start.gpuIndices] }]);
    // Past the settle delay, a placement would have happened by now if it were going to.
    await new Promise((r) => setTimeout(r, 100));
    await back.sync();
    expect(back.received.filter((m) => isStart(m) || isStop(m))).toEqual([]);
    expect(after.cp.replicas()[0]).toMatchObject({ phase: 'ready', generation: 1, url: `http://127.0.0.1:${start.httpPort}` });
  });

  it('numbers its first placement after the ended runs a node still reports once it restarted, never again from g1 (walkthrough 4, O16)', async () => {
    const { url } = await startControlPlane({ deployment: tiny() });
    const failed = { replicaId: 'tiny-0', rank: 0, nnodes: 1, gpuIndices: [0], httpPort: 18500, state: ShardState.FAILED };
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 2, runningShards: [{ ...failed, shardId: 'tiny-0-g9-r0' }, { ...failed, shardId: 'tiny-0-g7-r0' }] });
    const start = startOf(await a.waitFor(isStart));
    expect(start.shardId).toBe('tiny-0-g10-r0');
    // The ended runs are records, not shards: nothing of them is stopped.
    await a.sync();
    expect(a.received.filter(isStop)).toEqual([]);
  });

  it('starts at g1 when the node reports no run of the replica (the look-alike: an ended run of another replica counts for nothing)', async () => {
    const { url } = await startControlPlane({ deployment: tiny() });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 2, runningShards: [{ replicaId: 'gone-0', shardId: 'gone-0-g4-r0', rank: 0, nnodes: 1, gpuIndices: [1], httpPort: 18501, state: ShardState.FAILED }] });
    expect(startOf(await a.waitFor(isStart)).shardId).toBe('tiny-0-g1-r0');
  });

  it('stops a running shard of a replica that is not in the deployment', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny() });
    const a = agent({
      baseUrl: url,
      nodeId: 'node-a',
      gpus: 2,
      runningShards: [{ replicaId: 'gone-0', shardId: 'gone-0-g3-r0', rank: 0, nnodes: 1, gpuIndices: [1], httpPort: 18500, state: ShardState.READY }],
    });
    expect(stopOf(await a.waitFor(isStop)).shardId).toBe('gone-0-g3-r0');
    // The scaled-down shard's GPU stays booked until it is reported gone.
    const start = startOf(await a.waitFor(isStart));
    expect(start.gpuIndices).toEqual([0]);
    expect(cp.nodes()[0]?.freeGpus).toEqual([]);
  });

  it('stops a shard that is not ready within the startup timeout and starts a new generation', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny('300ms') });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 2 });
    const g1 = startOf(await a.waitFor(isStart));
    report(a, g1, ShardState.STARTING);
    const stop = stopOf(await a.waitFor(isStop));
    expect(stop.shardId).toBe(g1.shardId);
    const g2 = startOf(await a.waitFor((m) => isStart(m) && startOf(m).shardId !== g1.shardId));
    expect(g2.shardId).toBe('tiny-0-g2-r0');
    // The stopped shard's GPU is not free until its node says it is gone.
    expect(g2.gpuIndices).toEqual([1]);
    expect(cp.replicas()[0]?.lastError).toMatch(/not ready within the startup timeout/);
  });

  it('places a failed replica again after the backoff, on the GPU it freed', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny(), retryBackoffMs: 200 });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const g1 = startOf(await a.waitFor(isStart));
    report(a, g1, ShardState.FAILED, { error: 'engine exited while loading', exitCode: 3 });
    await handled(cp, 'node-a', g1.shardId, ShardState.FAILED);
    expect(cp.replicas()[0]).toMatchObject({ phase: 'backoff', shards: [] });
    expect(cp.replicas()[0]?.lastError).toContain('exit code 3');
    const g2 = startOf(await a.waitFor((m) => isStart(m) && startOf(m).shardId !== g1.shardId));
    expect(g2).toMatchObject({ shardId: 'tiny-0-g2-r0', gpuIndices: [0] });
    // A shard that reported FAILED is already gone: nothing to stop.
    expect(a.received.filter(isStop)).toEqual([]);
  });

  it('places a 2-node replica as rank 0 and rank 1 on two nodes, with the leader address and port', async () => {
    const { cp, url } = await startControlPlane({ deployment: TWO_NODE, portRange: [19200, 19220] });
    const a = agent({ baseUrl: url, nodeId: 'node-a', mgmtAddr: '10.0.0.1', gpus: 1 });
    await a.sync();
    expect(cp.replicas()[0]?.phase).toBe('pending');
    const b = agent({ baseUrl: url, nodeId: 'node-b', mgmtAddr: '10.0.0.2', gpus: 1 });
    const r0 = startOf(await a.waitFor(isStart));
    const r1 = startOf(await b.waitFor(isStart));
    expect(r0).toMatchObject({ shardId: 'big-0-g1-r0', rank: 0, nnodes: 2, gpuIndices: [0], leaderAddr: '10.0.0.1' });
    expect(r1).toMatchObject({ shardId: 'big-0-g1-r1', rank: 1, nnodes: 2, gpuIndices: [0], leaderAddr: '10.0.0.1' });
    expect(r1.leaderPort).toBe(r0.leaderPort);
    expect(r0.leaderPort).toBeGreaterThanOrEqual(19200);
    expect(new Set([r0.httpPort, r1.httpPort, r0.leaderPort]).size).toBe(3);

    // One rank failing ends the generation: the other rank is stopped.
    report(b, r1, ShardState.EXITED, { exitCode: 137 });
    expect(stopOf(await a.waitFor(isStop)).shardId).toBe(r0.shardId);
  });

  it('keeps a 2-node replica across an agent restart of rank 1 and across its own restart', async () => {
    const before = await startControlPlane({ deployment: TWO_NODE });
    const a = agent({ baseUrl: before.url, nodeId: 'node-a', mgmtAddr: '10.0.0.1', gpus: 1 });
    const b = agent({ baseUrl: before.url, nodeId: 'node-b', mgmtAddr: '10.0.0.2', gpus: 1 });
    const r0 = startOf(await a.waitFor(isStart));
    const r1 = startOf(await b.waitFor(isStart));
    report(a, r0, ShardState.READY);
    report(b, r1, ShardState.READY);
    await handled(before.cp, 'node-b', r1.shardId, ShardState.READY);

    // kill -9 of rank 1's agent, then it comes back with its engine still running.
    const aSeen = a.received.length;
    await b.kill();
    const b2 = agent({ baseUrl: before.url, nodeId: 'node-b', mgmtAddr: '10.0.0.2', gpus: 1, runningShards: [runningFrom(r1, ShardState.READY)] });
    await b2.sync();
    await a.sync();
    expect([...a.received.slice(aSeen), ...b2.received].filter((m) => isStart(m) || isStop(m))).toEqual([]);
    expect(before.cp.replicas()[0]).toMatchObject({ phase: 'ready', generation: 1 });
    await before.close();

    // A new control plane: rank 0's node registers first; the replica waits for rank 1 instead of being placed again.
    const after = await startControlPlane({ deployment: TWO_NODE });
    const a2 = agent({ baseUrl: after.url, nodeId: 'node-a', mgmtAddr: '10.0.0.1', gpus: 1, runningShards: [runningFrom(r0, ShardState.READY)] });
    await a2.sync();
    expect(after.cp.replicas()[0]).toMatchObject({ phase: 'waiting', shards: [{ shardId: r0.shardId }] });
    const ready = new Promise<ReplicaView>((resolve) => after.cp.once('replica-ready', resolve));
    const b3 = agent({ baseUrl: after.url, nodeId: 'node-b', mgmtAddr: '10.0.0.2', gpus: 1, runningShards: [runningFrom(r1, ShardState.READY)] });
    expect((await ready).shards.map((s) => s.shardId)).toEqual([r0.shardId, r1.shardId]);
    await b3.sync();
    await a2.sync();
    expect([...a2.received, ...b3.received].filter((m) => isStart(m) || isStop(m))).toEqual([]);
  });

  it('stops every shard when told to stop all, and places none of them again', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny(), retryBackoffMs: 50 });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.READY);
    await handled(cp, 'node-a', start.shardId, ShardState.READY);

    const stopping = cp.stopAllShards({ timeoutMs: 10_000 });
    expect(stopOf(await a.waitFor(isStop)).shardId).toBe(start.shardId);
    report(a, start, ShardState.STOPPED);
    await expect(stopping).resolves.toEqual({ stopped: [start.shardId], remaining: [] });
    // Well past the retry backoff: a STOPPED here is the end, not a failure to retry.
    await new Promise((r) => setTimeout(r, 300));
    await a.sync();
    expect(a.received.filter(isStart)).toHaveLength(1);
  });

  it('reports the shards not stopped within the timeout as remaining', async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny() });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const start = startOf(await a.waitFor(isStart));
    await expect(cp.stopAllShards({ timeoutMs: 200 })).resolves.toEqual({ stopped: [], remaining: [start.shardId] });
  });

  it("keeps a disconnected node's shards and places nothing elsewhere within the grace", async () => {
    const { cp, url } = await startControlPlane({ deployment: tiny(), nodeGraceMs: 60_000 });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.READY);
    await handled(cp, 'node-a', start.shardId, ShardState.READY);
    const gone = new Promise<string>((resolve) => cp.once('node-disconnected', (_id, reason) => resolve(reason)));
    await a.kill();
    await gone;

    const b = agent({ baseUrl: url, nodeId: 'node-b', gpus: 8 });
    await b.sync();
    expect(b.received.filter(isStart)).toEqual([]);
    expect(cp.nodes().find((n) => n.id === 'node-a')).toMatchObject({ connected: false, gpus: [{ shardId: start.shardId }] });
    expect(cp.replicas()[0]).toMatchObject({ phase: 'ready', shards: [{ shardId: start.shardId, nodeId: 'node-a' }] });
  });

  it("places a disconnected node's replicas elsewhere once the grace has passed", async () => {
    const { url } = await startControlPlane({ deployment: tiny(), nodeGraceMs: 200, retryBackoffMs: 0 });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const start = startOf(await a.waitFor(isStart));
    report(a, start, ShardState.READY);
    const b = agent({ baseUrl: url, nodeId: 'node-b', gpus: 1 });
    await b.sync();
    await a.kill();
    expect(startOf(await b.waitFor(isStart))).toMatchObject({ shardId: 'tiny-0-g2-r0', gpuIndices: [0] });
  });

  it('stops a shard when the node comes back with it after the replica was placed elsewhere', async () => {
    const { url } = await startControlPlane({ deployment: tiny(), nodeGraceMs: 100, retryBackoffMs: 0 });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1 });
    const g1 = startOf(await a.waitFor(isStart));
    const b = agent({ baseUrl: url, nodeId: 'node-b', gpus: 1 });
    await b.sync();
    await a.kill();
    await b.waitFor(isStart);
    const back = agent({ baseUrl: url, nodeId: 'node-a', gpus: 1, runningShards: [runningFrom(g1, ShardState.READY)] });
    expect(stopOf(await back.waitFor(isStop)).shardId).toBe(g1.shardId);
  });

  it('refuses a second stream for a node whose stream heartbeats, naming the peer, and lets one in once the first goes silent', async () => {
    const { cp, url } = await startControlPlane({});
    const refused: string[] = [];
    cp.on('node-refused', (_id, reason) => refused.push(reason));
    const live = agent({ baseUrl: url, nodeId: 'node-a' });
    await live.sync();
    const heartbeat = () => live.send({ case: 'heartbeat', value: { $typeName: 'llmgw.v1.Heartbeat', nodeId: 'node-a', gpuMemoryUsedMb: [] } });
    heartbeat();
    await sleep(100);
    heartbeat();
    await live.sync();

    const dup = agent({ baseUrl: url, nodeId: 'node-a' });
    await expect(dup.done).rejects.toThrow(/node node-a is already connected from 127\.0\.0\.1:\d+, since \d{4}-\d\d-\d\dT/);
    expect(refused).toHaveLength(1);
    expect(live.ended).toBe(false);
    expect(cp.messages('node-a').filter((m) => m.msg.case === 'register')).toHaveLength(1);

    // Silent for longer than its liveness window (at least MIN_LIVENESS_MS): taken for dead, replaced.
    await sleep(MIN_LIVENESS_MS + 300);
    const newer = agent({ baseUrl: url, nodeId: 'node-a' });
    await newer.sync();
    await live.done;
    expect(live.ended).toBe(true);
    expect(cp.nodes()).toMatchObject([{ id: 'node-a', connected: true }]);
  });

  it('replaces an older stream from the same node with a newer one', async () => {
    const { cp, url } = await startControlPlane({});
    const old = agent({ baseUrl: url, nodeId: 'node-a' });
    await old.sync();
    const newer = agent({ baseUrl: url, nodeId: 'node-a' });
    await newer.sync();
    await old.done;
    expect(old.ended).toBe(true);
    const id = cp.send('node-a', { case: 'stop', value: { $typeName: 'llmgw.v1.StopShard', shardId: 'x-g1-r0' } });
    const stop = await newer.waitFor(isStop);
    expect(stop.messageId).toBe(id);
    expect(cp.nodes()).toMatchObject([{ id: 'node-a', connected: true }]);
  });
});

describe('ControlPlane in manual mode', () => {
  it('rejects a message before Register, and a Register without node_id, with Ack ok=false', async () => {
    const { cp, url } = await startControlPlane({});
    const a = agent({ baseUrl: url, nodeId: 'anon', register: false });
    const hb = a.send({ case: 'heartbeat', value: { $typeName: 'llmgw.v1.Heartbeat', nodeId: 'anon', gpuMemoryUsedMb: [] } });
    const reg = a.send({ case: 'register', value: { $typeName: 'llmgw.v1.Register', nodeId: '', hostname: 'h', mgmtAddr: '', version: '', labels: {}, fabrics: [], runningShards: [], cordoned: false, gangEndpoint: '' } });
    const rejectHb = await a.waitFor((m) => m.msg.case === 'ack' && m.msg.value.messageId === hb);
    expect(rejectHb.msg.value).toMatchObject({ ok: false, error: expect.stringMatching(/before register/) });
    const rejectReg = await a.waitFor((m) => m.msg.case === 'ack' && m.msg.value.messageId === reg);
    expect(rejectReg.msg.value).toMatchObject({ ok: false, error: expect.stringMatching(/node_id/) });
    expect(cp.nodes()).toEqual([]);
  });

  it('records every message, sends commands on request and places nothing by itself', async () => {
    const { cp, url } = await startControlPlane({});
    expect(() => cp.send('node-a', { case: 'drain', value: { $typeName: 'llmgw.v1.DrainShard', shardId: 's' } })).toThrow(/not connected/);
    const registered = cp.waitFor('node-a', (m) => m.msg.case === 'register', 15_000);
    const a = agent({ baseUrl: url, nodeId: 'node-a', runningShards: [{ replicaId: 'r', shardId: 'r-g1-r0', nnodes: 1, state: ShardState.READY }] });
    await registered;
    const id = cp.send('node-a', { case: 'drain', value: { $typeName: 'llmgw.v1.DrainShard', shardId: 'r-g1-r0' } });
    const drain = await a.waitFor((m) => m.msg.case === 'drain');
    expect(drain.messageId).toBe(id);
    const status = cp.waitFor('node-a', (m) => m.msg.case === 'shard', 15_000);
    report(a, { shardId: 'r-g1-r0', replicaId: 'r' } as StartShard, ShardState.DRAINING);
    await status;
    expect(cp.messages('node-a').map((m) => m.msg.case)).toEqual(['register', 'shard']);
    expect(cp.nodes()[0]?.shards).toEqual([{ shardId: 'r-g1-r0', replicaId: 'r', state: ShardState.DRAINING, stateName: 'DRAINING' }]);
    // A running shard nobody asked for is left alone without a deployment.
    expect(a.received.filter((m) => isStop(m) || isStart(m))).toEqual([]);
    expect(cp.replicas()).toEqual([]);
  });

  it('logs a gpu_event with its cause, and places the replica again on a healthy GPU once the inventory says the first is not', async () => {
    const { logger, records } = captureLogger();
    const { cp, url } = await startControlPlane({ deployment: tiny(), retryBackoffMs: 200, logger });
    const a = agent({ baseUrl: url, nodeId: 'node-a', gpus: 2 });
    const g1 = startOf(await a.waitFor(isStart));
    expect(g1.gpuIndices).toEqual([0]);
    const event = cp.waitFor('node-a', (m) => m.msg.case === 'gpuEvent', 15_000);
    a.send({
      case: 'gpuEvent',
      value: create(GpuEventSchema, { gpuIndex: 0, kind: GpuEventKind.XID, xid: 79, message: 'Xid 79: GPU has fallen off the bus', source: 'nvml', shardIds: [g1.shardId] }),
    });
    await event;
    expect(records.find((r) => r.msg === 'gpu event')).toMatchObject({ node: 'node-a', gpu: 0, kind: 'XID', xid: 79, source: 'nvml', shards: [g1.shardId], err: 'Xid 79: GPU has fallen off the bus' });
    const inventory = fixtureInventory(2);
    Object.assign(inventory.gpus[0] as object, { healthy: false, error: 'Xid 79: GPU has fallen off the bus' });
    const updated = cp.waitFor('node-a', (m) => m.msg.case === 'inventory', 15_000);
    a.send({ case: 'inventory', value: inventory });
    await updated;
    report(a, g1, ShardState.FAILED, { error: 'GPU 0: Xid 79: GPU has fallen off the bus' });
    const g2 = startOf(await a.waitFor((m) => isStart(m) && startOf(m).shardId !== g1.shardId));
    expect(g2.gpuIndices).toEqual([1]);
    expect(a.received.filter((m) => m.msg.case === 'ack' && !m.msg.value.ok)).toEqual([]);
  });

  it('rejects waitFor on timeout', async () => {
    const { cp } = await startControlPlane({});
    await expect(cp.waitFor('nobody', () => true, 20)).rejects.toThrow(/timed out after 20 ms/);
  });
});

function runningFrom(start: StartShard, state: ShardState) {
  return {
    replicaId: start.replicaId,
    shardId: start.shardId,
    rank: start.rank,
    nnodes: start.nnodes,
    gpuIndices: [...start.gpuIndices],
    httpPort: start.httpPort,
    leaderAddr: start.leaderAddr,
    leaderPort: start.leaderPort,
    state,
    model: start.profile?.servedModelName ?? '',
    profile: start.profile?.name ?? '',
    engine: start.profile?.engine ?? '',
  };
}
