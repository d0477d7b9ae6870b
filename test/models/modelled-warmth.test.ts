import { create } from '@bufbuild/protobuf';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { modelledTimes } from '../../src/models/modelled-warmth.js';
import { WarmthLedger } from '../../src/agent/models/warmth-ledger.js';
import { expectedReady } from '../../src/control/expected-ready.js';
import { CachedModelSchema, ShardState, StartShardSchema, TimeToReadySchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { shardSnapshot } from '../helpers/shard-snapshot.js';

/*
 * Times to READY for rungs a node never started from, modelled from one it
 * did and a rate it measured (issue 41, item 2), and said as modelled.
 */
const MiB = 1024 * 1024;
const t = (from: string, medianSeconds: number, samples = 2) => create(TimeToReadySchema, { from, medianSeconds, samples });
const rate = (bytes: number, ms: number) => ({ bytes, ms, atMs: 0 });
const dir = mkdtempSync(join(tmpdir(), 'llmgw-modelled-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('modelled times to READY', () => {
  it('models the hub from the store and the hub rate, the store from the page cache and the disk rate, and says how', () => {
    const out = modelledTimes([t('store', 2), t('page-cache+compile', 0.5)], 128 * MiB, { hub: rate(64 * MiB, 1000), disk: rate(256 * MiB, 1000) });
    expect(out.map((x) => [x.from, x.medianSeconds, x.samples, x.basis])).toEqual([
      ['hub', 4, 0, 'store 2.0s + 128 MiB at 64 MiB/s from the hub (its last pull)'],
      ['store+compile', 1, 0, 'page-cache+compile 0.5s + 128 MiB at 256 MiB/s from disk (its last warm)'],
    ]);
  });

  it('models nothing already measured, nothing without the rung it comes from, the rate or the size', () => {
    expect(modelledTimes([t('store', 2), t('hub', 9)], 128 * MiB, { hub: rate(64 * MiB, 1000) })).toEqual([]);
    expect(modelledTimes([t('page-cache', 2)], 128 * MiB, { hub: rate(64 * MiB, 1000) })).toEqual([]);
    expect(modelledTimes([t('store', 2)], 128 * MiB, {})).toEqual([]);
    expect(modelledTimes([t('store', 2)], 0, { hub: rate(64 * MiB, 1000) })).toEqual([]);
    // A modelled figure is not a base for another.
    expect(modelledTimes([t('store', 2, 0)], 128 * MiB, { hub: rate(64 * MiB, 1000) })).toEqual([]);
  });

  it('are reported by the ledger from the rates it learned, kept across a restart, and placement takes them for the rung the node offers', async () => {
    const path = join(dir, 'warmth.json');
    const cached = [create(CachedModelSchema, { repo: 'acme/chat', revision: 'main', complete: true, bytes: BigInt(100 * MiB) })];
    const l = new WarmthLedger({ path, hasStore: true, logger: captureLogger().logger, cached: () => cached });
    const spec = create(StartShardSchema, { shardId: 'a', replicaId: 'r', gpuIndices: [0], profile: { name: 'p', engine: 'vllm', model: 'acme/chat' } });
    const s = shardSnapshot('a', { spec, startedAtMs: Date.now() - 3000 });
    l.follow({ shard: s, from: ShardState.UNSPECIFIED, to: ShardState.STARTING });
    l.follow({ shard: s, from: ShardState.STARTING, to: ShardState.READY });
    // Too small to say a rate: ignored.
    l.learnRate('hub', MiB, 10);
    expect(l.report([], cached)[0]?.learned.map((x) => x.from)).toEqual(['store']);
    l.learnRate('hub', 50 * MiB, 1000);
    const hub = l.report([], cached)[0]?.learned.find((x) => x.from === 'hub');
    expect(hub?.samples).toBe(0);
    expect(hub?.basis).toMatch(/^store \d+\.\ds \+ 100 MiB at 50 MiB\/s from the hub \(its last pull\)$/);
    expect(hub?.medianSeconds).toBeGreaterThanOrEqual(3 + 2);
    await l.flushed();
    const again = new WarmthLedger({ path, hasStore: true, logger: captureLogger().logger, cached: () => cached });
    const w = again.report([], [])[0];
    // Without the model in the store, its size is unknown: nothing modelled; with it, the rate read back models it.
    expect(w?.learned.map((x) => x.from)).toEqual(['store']);
    const back = again.report([], cached)[0];
    expect(back?.learned.find((x) => x.from === 'hub')?.basis).toMatch(/at 50 MiB\/s from the hub/);
    // A node where the model is absent: its own modelled hub time, said as such.
    const absent = { ...back, rung: 'absent' } as NonNullable<typeof back>;
    expect(expectedReady({ name: 'p', engine: 'vllm', model: 'acme/chat' }, [absent])).toMatchObject({ from: 'hub', basis: expect.stringMatching(/^store /) });
  });
});
