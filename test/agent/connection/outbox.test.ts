import { describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { HeartbeatSchema, ShardStatusSchema, type AgentMessage } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { Outbox, OutboxFullError } from '../../../src/agent/connection/outbox.js';

const tick = () => new Promise((r) => setTimeout(r, 0));

/** A sink that takes messages only when told to, like a stream under back-pressure. */
function gatedSink() {
  const taken: AgentMessage[] = [];
  const waiting: (() => void)[] = [];
  return {
    taken,
    write(m: AgentMessage) {
      return new Promise<void>((resolve) => {
        waiting.push(() => {
          taken.push(m);
          resolve();
        });
      });
    },
    /** Lets the oldest pending write through, once there is one. */
    async release() {
      for (let i = 0; i < 100 && waiting.length === 0; i++) await tick();
      waiting.shift()?.();
    },
    get waiting() {
      return waiting.length;
    },
  };
}

describe('Outbox', () => {
  it('numbers messages in the order they were queued and writes one at a time', async () => {
    const sink = gatedSink();
    let id = 0n;
    const outbox = new Outbox(sink, () => ++id);
    const a = outbox.send({ case: 'shard', value: create(ShardStatusSchema, { shardId: 'a' }) });
    const b = outbox.send({ case: 'shard', value: create(ShardStatusSchema, { shardId: 'b' }) });
    await tick();
    expect(sink.waiting).toBe(1);
    await sink.release();
    await a;
    await sink.release();
    await b;
    expect(sink.taken.map((m) => [m.messageId, (m.msg.value as { shardId: string }).shardId])).toEqual([
      [1n, 'a'],
      [2n, 'b'],
    ]);
  });

  it('drops a heartbeat while another is still waiting behind a stuck stream', async () => {
    const sink = gatedSink();
    let id = 0n;
    const outbox = new Outbox(sink, () => ++id);
    const status = outbox.send({ case: 'shard', value: create(ShardStatusSchema, { shardId: 'a' }) });
    for (let i = 0; i < 5; i++) void outbox.send({ case: 'heartbeat', value: create(HeartbeatSchema, {}) });
    expect(outbox.pending).toBe(2);
    await sink.release();
    await status;
    await sink.release();
    await tick();
    expect(sink.taken.map((m) => m.msg.case)).toEqual(['shard', 'heartbeat']);
  });

  it('refuses messages once closed, without writing them', async () => {
    const sink = gatedSink();
    const outbox = new Outbox(sink, () => 1n);
    outbox.close();
    await expect(outbox.send({ case: 'heartbeat', value: create(HeartbeatSchema, {}) })).rejects.toThrow(/closed/);
    expect(sink.waiting).toBe(0);
  });
});

describe('Outbox under a flood', () => {
  const status = (shardId: string, error = '') => ({ case: 'shard' as const, value: create(ShardStatusSchema, { shardId, error }) });

  it('keeps one pending status per shard, the latest, and resolves every sender when it is written', async () => {
    const sink = gatedSink();
    let id = 0n;
    const outbox = new Outbox(sink, () => ++id);
    const first = outbox.send(status('busy', 'first'));
    const sends = Array.from({ length: 10_000 }, (_, i) => outbox.send(status(i % 2 === 0 ? 'a' : 'b', `v${i}`)));
    expect(outbox.pending).toBe(3);
    for (let i = 0; i < 3; i++) await sink.release();
    await Promise.all([first, ...sends]);
    expect(sink.taken.map((m) => [m.messageId, (m.msg.value as { shardId: string; error: string }).error])).toEqual([
      [1n, 'first'],
      [2n, 'v9998'],
      [3n, 'v9999'],
    ]);
  });

  it('sends the freshest heartbeat, not the one queued first', async () => {
    const sink = gatedSink();
    const outbox = new Outbox(sink, () => 1n);
    void outbox.send(status('a'));
    for (let i = 0; i < 5; i++) void outbox.send({ case: 'heartbeat', value: create(HeartbeatSchema, { nodeId: `hb${i}` }) });
    await sink.release();
    await sink.release();
    await tick();
    expect(sink.taken.map((m) => (m.msg.case === 'heartbeat' ? m.msg.value.nodeId : m.msg.case))).toEqual(['shard', 'hb4']);
  });

  it('refuses new messages past its cap with OutboxFullError and counts them, while coalescing still works', async () => {
    const sink = gatedSink();
    const outbox = new Outbox(sink, () => 1n, { maxPending: 4 });
    const queued = Array.from({ length: 4 }, (_, i) => outbox.send(status(`s${i}`)));
    await expect(outbox.send(status('one-too-many'))).rejects.toBeInstanceOf(OutboxFullError);
    await expect(outbox.send(status('another'))).rejects.toThrow(/the outbox is full \(4 messages wait/);
    expect(outbox.dropped).toBe(2);
    // A newer status of a shard already waiting replaces it and is not refused.
    const replaced = outbox.send(status('s3', 'newer'));
    expect(outbox.pending).toBe(4);
    for (let i = 0; i < 4; i++) await sink.release();
    await Promise.all([...queued, replaced]);
    expect(sink.taken.map((m) => (m.msg.value as { error: string }).error)[3]).toBe('newer');
  });

  it('says how long it has been stalled, and 0 once the stream takes everything', async () => {
    const sink = gatedSink();
    let now = 1000;
    const outbox = new Outbox(sink, () => 1n, { nowMs: () => now });
    expect(outbox.stalledForMs()).toBe(0);
    const a = outbox.send(status('a'));
    void outbox.send(status('b'));
    now = 31_000;
    expect(outbox.stalledForMs()).toBe(30_000);
    await sink.release();
    await a;
    expect(outbox.stalledForMs()).toBe(0);
    now = 36_000;
    expect(outbox.stalledForMs()).toBe(5000);
    await sink.release();
    await tick();
    expect(outbox.stalledForMs()).toBe(0);
  });

  it('rejects what still waits when closed', async () => {
    const sink = gatedSink();
    const outbox = new Outbox(sink, () => 1n);
    const a = outbox.send(status('a'));
    const b = outbox.send(status('b'));
    await tick();
    outbox.close();
    await expect(b).rejects.toThrow(/closed/);
    await sink.release();
    await a;
    expect(sink.taken).toHaveLength(1);
  });
});
