import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { AgentMetrics } from '../../../src/agent/metrics/agent-metrics.js';
import { Outbox } from '../../../src/agent/connection/outbox.js';
import { StatusReporter } from '../../../src/agent/connection/status-reporter.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { type AgentMessage, GpuEventKind, GpuEventSchema, InventorySchema, ModelPullSchema, ModelPullState, RegisterSchema, ShardState, ShardStatusSchema, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { parseShardId } from '../../../src/lib/shard-id.js';
import { type Logger, silentLogger } from '../../../src/lib/logger.js';

/** An outbox over a sink that keeps what the stream took, in order. */
function recordingOutbox(): { outbox: Outbox; sent: AgentMessage[]; drained(): Promise<void> } {
  const sent: AgentMessage[] = [];
  let id = 0n;
  const outbox = new Outbox({ write: async (m) => void sent.push(m) }, () => ++id);
  // Writes are queued: a heartbeat queued last is taken after everything before it.
  const drained = async () => {
    while (outbox.pending > 0) await new Promise((r) => setImmediate(r));
  };
  return { outbox, sent, drained };
}

/** `send` runs while a session is open whose dial then fails; what the next, established session's stream took. */
async function afterFailedDial(reporter: StatusReporter, send: () => void): Promise<AgentMessage[]> {
  const failed = recordingOutbox();
  reporter.onSessionOpen(failed.outbox);
  send();
  await failed.drained();
  reporter.onSessionClosed();
  const next = recordingOutbox();
  reporter.onSessionOpen(next.outbox);
  reporter.onSessionEstablished();
  await next.drained();
  return next.sent;
}

const status = (shardId: string, state: ShardState, error = '') => create(ShardStatusSchema, { nodeId: 'n1', shardId, replicaId: `r-${shardId}`, state, error });

function shardsOf(sent: AgentMessage[]): [string, string, string][] {
  return sent.filter((m) => m.msg.case === 'shard').map((m) => {
    const s = m.msg.value as { shardId: string; state: ShardState; error: string };
    return [s.shardId, ShardState[s.state], s.error];
  });
}

function snapshot(shardId: string, state: ShardState): ShardSnapshot {
  return {
    shardId: parseShardId(shardId),
    replicaId: `r-${shardId}`,
    spec: create(StartShardSchema, { shardId, replicaId: `r-${shardId}` }),
    state,
    pid: 4242,
    adopted: false,
    servesHttp: true,
    error: state === ShardState.FAILED ? 'engine exited with code 1' : '',
    exitCode: state === ShardState.FAILED ? 1 : null,
    signal: null,
    lastOutput: [],
    startedAtMs: 0,
    logPath: '/dev/null',
    running: state !== ShardState.FAILED,
  };
}

describe('StatusReporter', () => {
  it('sends a report at once while a session is open', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    const { outbox, sent, drained } = recordingOutbox();
    reporter.onSessionOpen(outbox);
    reporter.onSessionEstablished();
    reporter.report(status('s1', ShardState.READY));
    await drained();
    expect(shardsOf(sent)).toEqual([['s1', 'READY', '']]);
    expect(reporter.pending).toEqual([]);
  });

  it('keeps only the latest status per shard while disconnected', () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.report(status('s1', ShardState.STARTING));
    reporter.report(status('s2', ShardState.STARTING));
    reporter.report(status('s1', ShardState.READY));
    reporter.report(status('s1', ShardState.FAILED, 'engine exited with code 1'));
    expect(reporter.pending.map((s) => [s.shardId, ShardState[s.state]])).toEqual([
      ['s1', 'FAILED'],
      ['s2', 'STARTING'],
    ]);
  });

  it('flushes the terminal ones after the next Register, and drops those Register already lists as running', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.report(status('s1', ShardState.FAILED, 'engine exited with code 1'));
    reporter.report(status('s2', ShardState.READY));
    reporter.report(status('s3', ShardState.EXITED));
    reporter.report(status('s4', ShardState.STOPPED));
    const { outbox, sent, drained } = recordingOutbox();
    // What runSession does: Register first, then the session opens.
    void outbox.send({ case: 'register', value: create(RegisterSchema, { nodeId: 'n1' }) });
    reporter.onSessionOpen(outbox);
    await drained();
    expect(sent[0]?.msg.case).toBe('register');
    expect(shardsOf(sent)).toEqual([
      ['s1', 'FAILED', 'engine exited with code 1'],
      ['s3', 'EXITED', ''],
      ['s4', 'STOPPED', ''],
    ]);
    // Kept until the stream is known to work, then forgotten.
    expect(reporter.pending.map((s) => s.shardId)).toEqual(['s1', 's3', 's4']);
    reporter.onSessionEstablished();
    expect(reporter.pending).toEqual([]);
  });

  it('sends a terminal status again after a session whose dial was refused: flushed into it, it never left the agent', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.report(status('s1', ShardState.FAILED, 'engine was killed by SIGKILL'));
    const refused = recordingOutbox();
    reporter.onSessionOpen(refused.outbox);
    reporter.report(status('s2', ShardState.EXITED));
    reporter.onSessionClosed();
    refused.outbox.close();
    const next = recordingOutbox();
    reporter.onSessionOpen(next.outbox);
    reporter.onSessionEstablished();
    await next.drained();
    expect(shardsOf(next.sent)).toEqual([
      ['s1', 'FAILED', 'engine was killed by SIGKILL'],
      ['s2', 'EXITED', ''],
    ]);
    expect(reporter.pending).toEqual([]);
  });

  it('sends an UNHEALTHY status that says why after the next Register too, since running shards carry no error', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.report(status('s1', ShardState.UNHEALTHY, 'GPU 1: Xid 79: GPU has fallen off the bus'));
    reporter.report(status('s2', ShardState.UNHEALTHY));
    const { outbox, sent, drained } = recordingOutbox();
    void outbox.send({ case: 'register', value: create(RegisterSchema, { nodeId: 'n1' }) });
    reporter.onSessionOpen(outbox);
    await drained();
    expect(shardsOf(sent)).toEqual([['s1', 'UNHEALTHY', 'GPU 1: Xid 79: GPU has fallen off the bus']]);
  });

  it('keeps reports again once the session closes, for the session after it', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    const first = recordingOutbox();
    reporter.onSessionOpen(first.outbox);
    reporter.onSessionClosed();
    first.outbox.close();
    reporter.report(status('s1', ShardState.EXITED));
    expect(reporter.pending.map((s) => s.shardId)).toEqual(['s1']);
    const second = recordingOutbox();
    reporter.onSessionOpen(second.outbox);
    await second.drained();
    expect(shardsOf(first.sent)).toEqual([]);
    expect(shardsOf(second.sent)).toEqual([['s1', 'EXITED', '']]);
  });

  it('drops other messages while disconnected: the next Register carries what they say', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.send({ case: 'inventory', value: create(InventorySchema, {}) });
    const { outbox, sent, drained } = recordingOutbox();
    reporter.onSessionOpen(outbox);
    reporter.send({ case: 'inventory', value: create(InventorySchema, { driverVersion: '550.1' }) });
    await drained();
    expect(sent.map((m) => m.msg.case)).toEqual(['inventory']);
    expect(reporter.pending).toEqual([]);
  });

  it('survives a stream that refuses a write: the session ends with that error, not the reporter', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    const outbox = new Outbox({ write: () => Promise.reject(new Error('stream reset')) }, () => 1n);
    reporter.onSessionOpen(outbox);
    // An unhandled rejection here would fail the run: vitest reports them as errors.
    reporter.report(status('s1', ShardState.READY));
    await new Promise((r) => setImmediate(r));
    expect(outbox.pending).toBe(0);
  });

  it('reports a supervisor transition as the shard status and counts an engine that ended on its own', async () => {
    const metrics = new AgentMetrics();
    const reporter = new StatusReporter({ nodeId: 'n1', metrics });
    const { outbox, sent, drained } = recordingOutbox();
    reporter.onSessionOpen(outbox);
    reporter.onSessionEstablished();
    // There at 0 before the first death, so that increase() sees it (walkthrough 3, item 2).
    expect(await metrics.registry.getSingleMetricAsString('llmgw_agent_engine_exits_total')).toMatch(/^llmgw_agent_engine_exits_total\{state="FAILED"\} 0$/m);
    reporter.onTransition({ shard: snapshot('s1', ShardState.READY), from: ShardState.STARTING, to: ShardState.READY });
    // The stream takes READY before the engine dies: a status still waiting in
    // the outbox would be replaced by the newer one of its shard.
    await drained();
    reporter.onTransition({ shard: snapshot('s1', ShardState.FAILED), from: ShardState.READY, to: ShardState.FAILED });
    await drained();
    expect(shardsOf(sent)).toEqual([
      ['s1', 'READY', ''],
      ['s1', 'FAILED', 'engine exited with code 1'],
    ]);
    const shard = sent[1]?.msg.value as { nodeId: string; pid: number; exitCode: number };
    expect([shard.nodeId, shard.pid, shard.exitCode]).toEqual(['n1', 4242, 1]);
    expect(await metrics.registry.getSingleMetricAsString('llmgw_agent_engine_exits_total')).toMatch(/^llmgw_agent_engine_exits_total\{state="FAILED"\} 1$/m);
  });
});

describe('StatusReporter: GPU events through a disconnect', () => {
  const event = (gpuIndex: number, xid: number) => create(GpuEventSchema, { gpuIndex, kind: GpuEventKind.XID, xid, message: `Xid ${xid}` });
  const eventsOf = (sent: AgentMessage[]) => sent.filter((m) => m.msg.case === 'gpuEvent').map((m) => (m.msg.value as { xid: number }).xid);

  it('keeps events raised while disconnected and sends them after the next Register, in order, once', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.gpuEvent(event(2, 79));
    reporter.gpuEvent(event(3, 48));
    expect(reporter.pendingGpuEvents.map((e) => e.xid)).toEqual([79, 48]);
    const { outbox, sent, drained } = recordingOutbox();
    void outbox.send({ case: 'register', value: create(RegisterSchema, { nodeId: 'n1' }) });
    reporter.onSessionOpen(outbox);
    reporter.gpuEvent(event(1, 94));
    await drained();
    reporter.onSessionEstablished();
    expect(sent.map((m) => m.msg.case)).toEqual(['register', 'gpuEvent', 'gpuEvent', 'gpuEvent']);
    expect(eventsOf(sent)).toEqual([79, 48, 94]);
    expect(reporter.pendingGpuEvents).toEqual([]);

    // The next session sends none of them again.
    reporter.onSessionClosed();
    const again = recordingOutbox();
    reporter.onSessionOpen(again.outbox);
    await again.drained();
    expect(eventsOf(again.sent)).toEqual([]);
  });

  it('sends again what a session whose dial failed took, and nothing an established one took', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    const next = await afterFailedDial(reporter, () => reporter.gpuEvent(event(2, 79)));
    expect(eventsOf(next)).toEqual([79]);
    expect(reporter.pendingGpuEvents).toEqual([]);
  });

  it('keeps the latest events at most, and says how many it dropped', async () => {
    const warnings: unknown[] = [];
    const logger = { ...silentLogger, warn: (o: unknown) => void warnings.push(o) } as unknown as Logger;
    const reporter = new StatusReporter({ nodeId: 'n1', maxKeptGpuEvents: 3, logger });
    for (const xid of [1, 2, 3, 4, 5]) reporter.gpuEvent(event(0, xid));
    const { outbox, sent, drained } = recordingOutbox();
    reporter.onSessionOpen(outbox);
    reporter.onSessionEstablished();
    await drained();
    expect(eventsOf(sent)).toEqual([3, 4, 5]);
    expect(warnings).toEqual([{ dropped: 2, kept: 3 }]);
  });
});

const pull = (repo: string, state: ModelPullState, error = '') => create(ModelPullSchema, { repo, revision: 'main', state, error });

function pullsOf(sent: AgentMessage[]): [string, string][] {
  return sent.filter((m) => m.msg.case === 'modelPull').map((m) => {
    const p = m.msg.value as { repo: string; state: ModelPullState };
    return [p.repo, ModelPullState[p.state]];
  });
}

describe('StatusReporter, model pulls', () => {
  it('keeps the outcome of a pull that ended while no stream was open, and sends it after the next Register', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.modelPull(pull('acme/tiny', ModelPullState.PROGRESS));
    reporter.modelPull(pull('acme/tiny', ModelPullState.FAILED, 'the hub answered 404'));
    reporter.modelPull(pull('acme/small', ModelPullState.DONE));
    reporter.modelPull(pull('acme/big', ModelPullState.PROGRESS));
    expect(reporter.pendingModelPulls.map((p) => p.repo)).toEqual(['acme/tiny', 'acme/small']);
    const { outbox, sent, drained } = recordingOutbox();
    await outbox.send({ case: 'register', value: create(RegisterSchema, { nodeId: 'n1' }) });
    reporter.onSessionOpen(outbox);
    reporter.onSessionEstablished();
    await drained();
    expect(sent[0]?.msg.case).toBe('register');
    expect(pullsOf(sent)).toEqual([
      ['acme/tiny', 'FAILED'],
      ['acme/small', 'DONE'],
    ]);
    expect(reporter.pendingModelPulls).toEqual([]);
  });

  it('sends an outcome again after a session whose dial failed took it', async () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    const next = await afterFailedDial(reporter, () => reporter.modelPull(pull('acme/tiny', ModelPullState.DONE)));
    expect(pullsOf(next)).toEqual([['acme/tiny', 'DONE']]);
  });

  it('forgets a kept outcome when the same model is pulled again', () => {
    const reporter = new StatusReporter({ nodeId: 'n1' });
    reporter.modelPull(pull('acme/tiny', ModelPullState.FAILED, 'disk full'));
    reporter.modelPull(pull('acme/tiny', ModelPullState.STARTED));
    expect(reporter.pendingModelPulls).toEqual([]);
  });
});
