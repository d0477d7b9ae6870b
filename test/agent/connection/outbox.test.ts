import { describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { GpuEventSchema, HeartbeatSchema, InventorySchema, ShardState, ShardStatusSchema, type AgentMessage } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { MAX_INVENTORY_DEFER_MS, Outbox, OutboxFullError } from '../../../src/agent/connection/outbox.js';

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

describe('Outbox: Inventories behind the one being written', () => {
  const status = (shardId: string, state = ShardState.READY) => ({ case: 'shard' as const, value: create(ShardStatusSchema, { shardId, state }) });
  /** An Inventory told apart by its driver version. */
  const inventory = (v: string) => ({ case: 'inventory' as const, value: create(InventorySchema, { driverVersion: v }) });
  const gpuEvent = (message: string) => ({ case: 'gpuEvent' as const, value: create(GpuEventSchema, { message }) });
  const said = (m: AgentMessage) => {
    switch (m.msg.case) {
      case 'inventory':
        return `I ${m.msg.value.driverVersion}`;
      case 'shard':
        return `S ${m.msg.value.shardId} ${ShardState[m.msg.value.state]}`;
      case 'gpuEvent':
        return `G ${m.msg.value.message}`;
      default:
        return m.msg.case;
    }
  };

  /** An outbox whose first Inventory ('a') the stream is writing (taken, not done) when it returns. */
  async function writingInventory(opts: { nowMs?: () => number } = {}) {
    const sink = gatedSink();
    let id = 0n;
    const outbox = new Outbox(sink, () => ++id, opts);
    const sends = [outbox.send(inventory('a'))];
    for (let i = 0; i < 100 && sink.waiting === 0; i++) await tick();
    expect(sink.waiting).toBe(1);
    /** Lets the stream take everything, then what it took, in order. */
    const drain = async () => {
      for (let i = 0; i < 1000 && outbox.pending > 0; i++) await sink.release();
      await Promise.all(sends);
      expect(sink.taken.map((m) => m.messageId)).toEqual(sink.taken.map((_, i) => BigInt(i + 1)));
      return sink.taken.map(said);
    };
    const send = (msg: AgentMessage['msg']) => sends.push(outbox.send(msg));
    return { outbox, send, drain };
  }

  it('sends a burst of READYs before the Inventory waiting behind the one being written, and only the newest of those asked meanwhile', async () => {
    const { send, drain } = await writingInventory();
    // Each engine's READY, then the two Inventories its warmth asks for (time to READY, then its GPU memory).
    for (const shard of ['s0', 's1', 's2']) {
      send(status(shard));
      send(inventory(`${shard} time`));
      send(inventory(`${shard} memory`));
    }
    expect(await drain()).toEqual(['I a', 'S s0 READY', 'S s1 READY', 'S s2 READY', 'I s2 memory']);
  });

  it('keeps one shard\'s statuses one message, its latest, and the statuses of several in the order they were queued', async () => {
    const { send, drain } = await writingInventory();
    send(status('x', ShardState.STARTING));
    send(inventory('b'));
    send(status('y', ShardState.READY));
    send(status('x', ShardState.READY));
    send(status('x', ShardState.FAILED));
    expect(await drain()).toEqual(['I a', 'S x FAILED', 'S y READY', 'I b']);
  });

  it('sends an Inventory asked for after a status after it, with what it said last (the look-alike of one superseded)', async () => {
    const sink = gatedSink();
    let id = 0n;
    const outbox = new Outbox(sink, () => ++id);
    const sends = [outbox.send(status('s0')), outbox.send(inventory('after s0'))];
    await sink.release();
    await sink.release();
    await Promise.all(sends);
    expect(sink.taken.map(said)).toEqual(['S s0 READY', 'I after s0']);
  });

  it('lets no newer Inventory and no status pass a GPU event or a heartbeat queued behind a waiting Inventory', async () => {
    const { send, drain } = await writingInventory();
    send(inventory('b'));
    send(status('s0'));
    send(gpuEvent('Xid 79'));
    send(status('s1', ShardState.UNHEALTHY));
    // The Inventory that marks the GPU: after the event that says why, never in the place of 'b'.
    send(inventory('c'));
    send({ case: 'heartbeat', value: create(HeartbeatSchema, {}) });
    send(status('s2'));
    send(inventory('d'));
    expect(await drain()).toEqual(['I a', 'S s0 READY', 'I b', 'G Xid 79', 'S s1 UNHEALTHY', 'I c', 'heartbeat', 'S s2 READY', 'I d']);
  });

  it(`keeps an Inventory's place once it has waited ${MAX_INVENTORY_DEFER_MS} ms: statuses wait for it and a newer one queues behind it`, async () => {
    let now = 0;
    const { send, drain } = await writingInventory({ nowMs: () => now });
    send(inventory('b'));
    now = MAX_INVENTORY_DEFER_MS - 1;
    send(status('s0'));
    send(inventory('c'));
    now = MAX_INVENTORY_DEFER_MS;
    send(status('s1'));
    send(inventory('d'));
    send(status('s2'));
    // 'c' replaced 'b' behind s0, keeping b's age: overdue, s1 waits for it and 'd' queues behind it, its own age (s2 passes it).
    expect(await drain()).toEqual(['I a', 'S s0 READY', 'I c', 'S s1 READY', 'S s2 READY', 'I d']);
  });
});
