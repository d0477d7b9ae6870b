import { create, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { Outbox } from '../../../src/agent/connection/outbox.js';
import { type AgentMessage, InventorySchema, ShardState, ShardStatusSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { startHoldableRelay } from '../../helpers/holdable-relay.js';
import { isRegister } from '../../helpers/sim-shards.js';
import { startControlPlane } from '../../helpers/start-control-plane.js';
import { runTestConnection } from '../../helpers/test-connection.js';

/*
 * A burst of engines becoming READY on a big node (bench figure 16, 64
 * shards): each READY's warmth asks for two Inventories of the whole node,
 * and one Inventory takes more than an HTTP/2 flow-control window. The
 * control plane (the reference one, in process) must get every READY before
 * the Inventories asked for meanwhile, and of those only the newest.
 */

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** 64 GPUs' worth of links and more: past two 64 KiB flow-control windows. */
const LINKS = Array.from({ length: 8000 }, (_, i) => ({ a: `GPU${i % 64}`, b: `mlx5_${i % 16}`, connection: 'NV18', nvlinks: 18 }));
const inventory = (v: string) => ({ case: 'inventory' as const, value: create(InventorySchema, { driverVersion: v, links: LINKS }) });
const status = (shardId: string, state: ShardState) => ({ case: 'shard' as const, value: create(ShardStatusSchema, { nodeId: 'node-a', shardId, state }) });

function said(m: AgentMessage): string | undefined {
  if (m.msg.case === 'inventory') return `I ${m.msg.value.driverVersion}`;
  if (m.msg.case === 'shard') return `S ${m.msg.value.shardId} ${ShardState[m.msg.value.state]}`;
  return undefined;
}

describe('a burst of READYs behind an Inventory the stream is writing', () => {
  it('reaches the control plane with every READY first, in order, then the newest Inventory only', async () => {
    expect(toBinary(InventorySchema, inventory('x').value).length).toBeGreaterThan(2 * 65_536);
    const { cp, port } = await startControlPlane();
    const relay = await startHoldableRelay(port);
    let outbox: Outbox | undefined;
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    // No heartbeat within the test: a heartbeat is a message Inventories and statuses keep their order with.
    runTestConnection('node-a', { server: `http://127.0.0.1:${relay.port}`, heartbeatIntervalMs: 60_000 }, (o) => {
      outbox = o;
    });
    await registered;
    const out = outbox as Outbox;
    const sends: Promise<void>[] = [];
    const send = (msg: AgentMessage['msg']) => sends.push(out.send(msg));

    const starting = cp.waitFor('node-a', (m) => m.msg.case === 'shard', 20_000);
    send(status('x', ShardState.STARTING));
    await starting;
    // The link goes quiet: the control plane's window updates wait, so the stream is still writing 'first' through the
    // burst. Queued on an empty outbox, it is taken on the next microtask.
    relay.hold();
    send(inventory('first'));
    await turn();
    const shards = Array.from({ length: 8 }, (_, i) => `s${i}`);
    for (const shard of shards) {
      send(status(shard, ShardState.READY));
      send(inventory(`${shard} time`));
      // The GPU memory read comes on a later turn of the loop (warmth-ledger.ts, fresh-gpu-reads.ts).
      await turn();
      send(inventory(`${shard} memory`));
      if (shard === 's3') send(status('x', ShardState.READY));
    }
    send(status('x', ShardState.FAILED));
    const last = cp.waitFor('node-a', (m) => m.msg.case === 'inventory' && m.msg.value.driverVersion === 's7 memory', 20_000);
    relay.release();
    await last;
    await Promise.all(sends);

    const wire = cp.messages('node-a').map(said).filter((s) => s !== undefined);
    // x's READY, still waiting when its FAILED came, is replaced by it in its place: never a READY after the FAILED.
    const ready = shards.map((s) => `S ${s} READY`);
    expect(wire).toEqual(['S x STARTING', 'I first', ...ready.slice(0, 4), 'S x FAILED', ...ready.slice(4), 'I s7 memory']);
  });
});
