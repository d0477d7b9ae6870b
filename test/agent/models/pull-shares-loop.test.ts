import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ModelPull, ModelPullState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { ModelPrefetch } from '../../../src/agent/models/model-prefetch.js';
import { BandwidthLimiter } from '../../../src/models/bandwidth-limiter.js';
import { BLOCK_BYTES } from '../../../src/models/block-pool.js';
import { ConcurrencyLimit } from '../../../src/models/concurrency-limit.js';
import type { ModelStore } from '../../../src/models/model-store-options.js';
import { pullModel } from '../../../src/models/pull-model.js';
import { StoreLayout } from '../../../src/models/store-layout.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { type HubProcess, startHubProcess } from '../../helpers/hub-process.js';

/*
 * The agent's pulls share its event loop with health probes, heartbeats and
 * the admin socket. A near hub's stream read in place hashes and writes each
 * socket read on the loop's thread, and libuv reads a readable socket up to
 * 32 times in one poll: one loop turn held 32 MiB of sha256 and writes, over a
 * second on a loaded host (bench/loop-during-pull.ts). What a turn does is
 * counted here in bytes, not milliseconds: the store's files are looked at
 * once per turn (a setImmediate chain), and the most they grew between two
 * looks is what one turn wrote. The hub runs in a process of its own, so
 * its serving is not on the loop measured.
 */

const MiB = 1024 * 1024;
/** Per connection a turn reads at most MAX_BLOCKS_HELD (8) blocks before their writes; two connections, and slack for a write returning in the same poll. */
const SHARED_TURN_BOUND = 2 * 12 * BLOCK_BYTES;

let hub: HubProcess;
const roots: string[] = [];

beforeAll(async () => {
  hub = await startHubProcess({ files: 2, mib: 48 });
});
afterAll(async () => {
  await hub?.stop();
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

function newStore(): ModelStore {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-shared-loop-'));
  roots.push(root);
  return {
    layout: new StoreLayout(join(root, 'models')),
    hub: { endpoint: hub.url, tokenFile: '', redirectHosts: [] },
    budget: 1024 * MiB,
    concurrency: new ConcurrencyLimit(4),
    limiter: new BandwidthLimiter(undefined),
  };
}

/** The bytes the store holds of acme/big's weights: partial or renamed into place. */
function storeBytes(layout: StoreLayout): number {
  let total = 0;
  for (const f of hub.files) {
    const partial = statSync(layout.incompletePath('acme/big', f.sha256), { throwIfNoEntry: false });
    total += partial?.size ?? statSync(layout.blobPath('acme/big', f.sha256), { throwIfNoEntry: false })?.size ?? 0;
  }
  return total;
}

/** Runs `pull` and looks at the store once per loop turn until it ends: the most bytes one turn wrote, and the turns. */
async function bytesPerTurn(layout: StoreLayout, pull: () => Promise<unknown>): Promise<{ maxBytes: number; turns: number; total: number }> {
  let running = true;
  let last = 0;
  let maxBytes = 0;
  let turns = 0;
  const look = () => {
    const now = storeBytes(layout);
    maxBytes = Math.max(maxBytes, now - last);
    last = now;
    turns++;
    if (running) setImmediate(look);
  };
  setImmediate(look);
  try {
    await pull();
  } finally {
    running = false;
  }
  return { maxBytes, turns, total: storeBytes(layout) };
}

describe('a pull beside the agent’s other work on one event loop', () => {
  it('the agent’s pull (a PrefetchModel) writes at most a few blocks per loop turn, and its digests are checked', async () => {
    const store = newStore();
    const sent: ModelPull[] = [];
    const prefetch = new ModelPrefetch({ store, send: (p) => sent.push(p), onStoreChanged: () => {}, signal: AbortSignal.timeout(120_000), logger: captureLogger().logger });
    const r = await bytesPerTurn(store.layout, () => prefetch.prefetch({ repo: 'acme/big', revision: 'main', include: [], pageCache: false } as never));
    expect(sent.at(-1)?.state, sent.at(-1)?.error).toBe(ModelPullState.DONE);
    expect(r.total).toBe(96 * MiB);
    expect(r.maxBytes).toBeLessThanOrEqual(SHARED_TURN_BOUND);
  }, 180_000);

  it('`llmgw models pull`, which owns its process, still reads in place: megabytes in one turn', async () => {
    const store = newStore();
    const r = await bytesPerTurn(store.layout, () => pullModel({ repo: 'acme/big', revision: 'main', include: [] }, { ...store, signal: AbortSignal.timeout(120_000) }));
    expect(r.total).toBe(96 * MiB);
    expect(r.maxBytes).toBeGreaterThan(SHARED_TURN_BOUND);
  }, 180_000);
});
