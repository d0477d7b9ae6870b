import { describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { HeartbeatSchema, ShardStatusSchema, type AgentMessage } from '../../src/gen/llmgw/v1/agent_pb.js';
import { Outbox } from '../../src/agent/outbox.js';

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
