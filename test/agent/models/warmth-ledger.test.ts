import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { MEMORY_TELL_WAIT_MS, WARMTH_MODELS, WARMTH_SAMPLES, WarmthLedger } from '../../../src/agent/models/warmth-ledger.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { CachedModelSchema, ShardState as S, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { compileDirsByEngine } from '../../../src/agent/engines/engine-catalog.js';
import { hasCompileCache } from '../../../src/models/compile-cache.js';
import { EngineCacheWatch } from '../../../src/models/engine-cache-watch.js';
import { StoreLayout } from '../../../src/models/store-layout.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import { until } from '../../helpers/engine-processes.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-warmth-'));
const ledgers: WarmthLedger[] = [];
// Every ledger's writes land before the folder goes: one still renaming into it made rmSync fail.
afterAll(async () => {
  await Promise.all(ledgers.map((l) => l.flushed()));
  rmSync(dir, { recursive: true, force: true });
});
let n = 0;
const fresh = () => join(dir, `warmth-${n++}.json`);
/** A ledger whose writes the suite waits for. */
function ledger(opts: ConstructorParameters<typeof WarmthLedger>[0]): WarmthLedger {
  const l = new WarmthLedger(opts);
  ledgers.push(l);
  return l;
}

function shard(id: string, startedAtMs: number, over: Partial<ShardSnapshot> = {}, model = 'acme/chat'): ShardSnapshot {
  const spec = create(StartShardSchema, { shardId: id, replicaId: 'r', gpuIndices: [0], profile: { name: 'chat-tp1', engine: 'vllm', model } });
  return shardSnapshot(id, { spec, startedAtMs, ...over });
}

/** A launch `ms` before now, then READY now. */
function launchedAndReady(l: WarmthLedger, s: ShardSnapshot): void {
  l.follow({ shard: s, from: S.UNSPECIFIED, to: S.STARTING, why: 'launched' });
  l.follow({ shard: s, from: S.STARTING, to: S.READY, why: 'answers /health' });
}

describe('WarmthLedger', () => {
  it('close() resolves once the last measurement is on disk; one measured after stays in memory only', async () => {
    const path = fresh();
    const l = ledger({ path, hasStore: true, logger: captureLogger().logger });
    l.learnRate('disk', 64 * 1024 * 1024, 100);
    await l.close();
    expect(JSON.parse(readFileSync(path, 'utf8')).rates.disk).toMatchObject({ bytes: 64 * 1024 * 1024, ms: 100 });
    l.learnRate('hub', 64 * 1024 * 1024, 400);
    await l.flushed();
    expect(JSON.parse(readFileSync(path, 'utf8')).rates.hub).toBeUndefined();
    expect(l.rates().hub).toMatchObject({ ms: 400 });
  });

  it('measures launch to READY by where the start came from, and reports the median with the count', () => {
    const learned: number[] = [];
    const l = ledger({ path: fresh(), hasStore: true, logger: captureLogger().logger, onLearned: () => learned.push(1) });
    const now = Date.now();
    launchedAndReady(l, shard('a', now - 3000));
    launchedAndReady(l, shard('b', now - 1000));
    launchedAndReady(l, shard('c', now - 2000));
    launchedAndReady(l, shard('d', now - 90_000, { note: 'started online (HF_HUB_OFFLINE unset): acme/chat is not complete in the store' }));
    const [w] = l.report([], []);
    expect(w).toMatchObject({ model: 'acme/chat', engine: 'vllm', profile: 'chat-tp1', rung: 'absent' });
    const byFrom = Object.fromEntries((w?.learned ?? []).map((t) => [t.from, t]));
    expect(byFrom.store?.samples).toBe(3);
    // The median of about 3 s, 1 s and 2 s: 2 s, give or take the test's own milliseconds.
    expect(byFrom.store?.medianSeconds).toBeGreaterThanOrEqual(2);
    expect(byFrom.store?.medianSeconds).toBeLessThan(2 + 5);
    expect(byFrom.hub).toMatchObject({ samples: 1 });
    expect(byFrom.hub?.medianSeconds).toBeGreaterThanOrEqual(90);
    expect(learned).toHaveLength(4);
  });

  it('says the rung the node offers now: serving, sleeping, store, partial, absent, or unmanaged without a store', () => {
    const l = ledger({ path: fresh(), hasStore: true, logger: captureLogger().logger });
    launchedAndReady(l, shard('a', Date.now()));
    const rung = (shards: ShardSnapshot[], complete?: boolean) =>
      l.report(shards, complete === undefined ? [] : [create(CachedModelSchema, { repo: 'acme/chat', revision: 'main', complete })])[0]?.rung;
    expect(rung([shard('a', 0)])).toBe('serving');
    expect(rung([shard('a', 0, { state: S.SLEEPING })])).toBe('sleeping-l1');
    expect(rung([shard('a', 0, { state: S.SLEEPING, sleepLevel: 2 })])).toBe('sleeping-l2');
    expect(rung([], true)).toBe('store');
    expect(rung([], false)).toBe('partial');
    expect(rung([])).toBe('absent');
    // Another model's READY shard is not this model's warmth.
    expect(rung([shard('x', 0, {}, 'acme/other')], true)).toBe('store');
    const bare = ledger({ path: fresh(), hasStore: false, logger: captureLogger().logger });
    launchedAndReady(bare, shard('a', Date.now()));
    expect(bare.report([], [])[0]).toMatchObject({ rung: 'unmanaged', learned: [{ from: 'unmanaged', samples: 1 }] });
  });

  it('calls a model mostly in the page cache warm in memory, and times a start from it apart from one from disk', () => {
    let cached = [create(CachedModelSchema, { repo: 'acme/chat', revision: 'main', complete: true, bytes: 1000n, residentBytes: 950n })];
    const l = ledger({ path: fresh(), hasStore: true, logger: captureLogger().logger, cached: () => cached });
    launchedAndReady(l, shard('hot', Date.now() - 500));
    expect(l.report([], cached)[0]).toMatchObject({ rung: 'page-cache', learned: [{ from: 'page-cache', samples: 1 }] });
    // Evicted since: on disk only, below the 90% that counts.
    cached = [create(CachedModelSchema, { repo: 'acme/chat', revision: 'main', complete: true, bytes: 1000n, residentBytes: 890n })];
    launchedAndReady(l, shard('cold', Date.now() - 5000));
    const w = l.report([], cached)[0];
    expect(w?.rung).toBe('store');
    expect(w?.learned.map((t) => [t.from, t.samples])).toEqual([['page-cache', 1], ['store', 1]]);
  });

  it('times a start with a compile cache in the store apart from one without (issue 41: weights and JIT caches), the real store layout deciding', async () => {
    const store = mkdtempSync(join(dir, 'store-'));
    const cached = [create(CachedModelSchema, { repo: 'acme/chat', revision: 'main', complete: true, bytes: 1000n, residentBytes: 0n })];
    const watch = new EngineCacheWatch(new StoreLayout(store), { compileDirs: compileDirsByEngine() });
    const l = ledger({ path: fresh(), hasStore: true, logger: captureLogger().logger, cached: () => cached, compiled: (m, e) => watch.compiled(m, e) });
    launchedAndReady(l, shard('cold', Date.now() - 9000));
    expect(l.report([], cached)[0]?.rung).toBe('store');
    // What vLLM writes under VLLM_CACHE_ROOT once it compiled (the agent's engine cache for the model).
    const graphs = join(new StoreLayout(store).engineCacheDir(0, 'vllm', 'acme/chat'), 'vllm', 'torch_compile_cache', 'abc', 'rank_0_0');
    mkdirSync(graphs, { recursive: true });
    await watch.refresh();
    expect(l.report([], cached)[0]?.rung).toBe('store');
    writeFileSync(join(graphs, 'graph.py'), '# compiled');
    // Reports read the last survey (the store's rescans make them), never the folders themselves.
    expect(l.report([], cached)[0]?.rung).toBe('store');
    await watch.refresh();
    expect(l.report([], cached)[0]?.rung).toBe('store+compile');
    launchedAndReady(l, shard('warm', Date.now() - 2000));
    expect(l.report([], cached)[0]?.learned.map((t) => [t.from, t.samples])).toEqual([['store+compile', 1], ['store', 1]]);
    // Another engine's cache is not this one's.
    expect(await hasCompileCache(new StoreLayout(store), 'sglang', 'acme/chat', compileDirsByEngine())).toBe(false);
    expect(await hasCompileCache(new StoreLayout(store), 'vllm', 'acme/chat', compileDirsByEngine())).toBe(true);
  });

  it('measures a wake from its request, and nothing for an adoption, a failed start or a stop', () => {
    const l = ledger({ path: fresh(), hasStore: true, logger: captureLogger().logger });
    const asleep = shard('w', 0, { state: S.SLEEPING });
    l.wakeAsked(asleep);
    l.follow({ shard: asleep, from: S.SLEEPING, to: S.READY, why: 'woken' });
    const adopted = shard('ad', Date.now() - 5000, { adopted: true });
    launchedAndReady(l, adopted);
    const failing = shard('f', Date.now());
    l.follow({ shard: failing, from: S.UNSPECIFIED, to: S.STARTING, why: 'launched' });
    l.follow({ shard: failing, from: S.STARTING, to: S.FAILED, why: 'engine exited with code 1 while starting' });
    l.follow({ shard: failing, from: S.FAILED, to: S.READY, why: 'not a real transition: nothing is pending' });
    expect(l.report([], [])[0]?.learned.map((t) => [t.from, t.samples])).toEqual([['sleeping-l1', 1]]);
  });

  it('keeps what it measured across a restart, in a bounded file, and starts empty from one it cannot read', async () => {
    const path = fresh();
    const log = captureLogger();
    const l = ledger({ path, hasStore: true, logger: log.logger });
    for (let i = 0; i < WARMTH_SAMPLES + 3; i++) launchedAndReady(l, shard(`s${i}`, Date.now() - 1000));
    for (let i = 0; i < WARMTH_MODELS + 5; i++) launchedAndReady(l, shard(`m${i}`, Date.now(), {}, `acme/m${i}`));
    await l.flushed();
    const again = ledger({ path, hasStore: true, logger: log.logger });
    const report = again.report([], []);
    expect(report).toHaveLength(WARMTH_MODELS);
    // The most recent first; the oldest models (acme/chat among them) gave way.
    expect(report[0]?.model).toBe(`acme/m${WARMTH_MODELS + 4}`);
    expect(report.some((w) => w.model === 'acme/chat')).toBe(false);
    expect(JSON.parse(readFileSync(path, 'utf8')).entries).toHaveLength(WARMTH_MODELS);
    // Samples per rung are bounded too.
    const one = ledger({ path: fresh(), hasStore: true, logger: log.logger });
    for (let i = 0; i < WARMTH_SAMPLES + 3; i++) launchedAndReady(one, shard(`s${i}`, Date.now()));
    expect(one.report([], [])[0]?.learned[0]?.samples).toBe(WARMTH_SAMPLES);
    // A damaged file: said once, and the ledger starts empty rather than failing the agent.
    const bad = fresh();
    writeFileSync(bad, '{"version":1,"entries":');
    expect(ledger({ path: bad, hasStore: true, logger: log.logger }).report([], [])).toEqual([]);
    expect(log.records.some((r) => r.msg === 'ignoring the warmth file: times to READY are measured anew' && r.file === bad)).toBe(true);
  });
});

describe('a rung\'s spread (issue 51)', () => {
  it('publishes the P50 and P90 of its last 20 samples, the median of its last 8: a node that got faster is followed, two slow starts in 20 are the P90 and one is not', () => {
    // Frozen clock: each start takes exactly what it is launched for, so no millisecond of jitter scores a start as over.
    vi.useFakeTimers({ toFake: ['Date'], now: 1_000_000 });
    try {
      const l = ledger({ path: fresh(), hasStore: false, logger: captureLogger().logger });
      // 12 slow starts (5 s), then 8 fast ones (1 s): the median follows the node, the spread remembers.
      for (let i = 0; i < 12; i++) launchedAndReady(l, shard(`slow${i}`, Date.now() - 5000));
      for (let i = 0; i < 8; i++) launchedAndReady(l, shard(`fast${i}`, Date.now() - 1000));
      const t = l.report([], [])[0]?.learned[0];
      expect(t?.samples).toBe(20);
      expect(t?.medianSeconds).toBe(1);
      expect(t?.p50Seconds).toBe(5);
      expect(t?.p90Seconds).toBe(5);
      // Two slow starts of 20 (one in ten): the 19th is slow, and is the P90.
      const m = ledger({ path: fresh(), hasStore: false, logger: captureLogger().logger });
      for (let i = 0; i < 20; i++) launchedAndReady(m, shard(`m${i}`, Date.now() - (i === 3 || i === 15 ? 5000 : 1000)));
      expect(m.report([], [])[0]?.learned[0]?.p90Seconds).toBeGreaterThanOrEqual(5);
      // Look-alike: one slow start of 20 is not the P90; it went over the P90 before it, so the P90 is widened a little.
      const one = ledger({ path: fresh(), hasStore: false, logger: captureLogger().logger });
      for (let i = 0; i < 20; i++) launchedAndReady(one, shard(`o${i}`, Date.now() - (i === 15 ? 5000 : 1000)));
      const p90 = one.report([], [])[0]?.learned[0]?.p90Seconds ?? 0;
      expect(p90).toBeGreaterThanOrEqual(1);
      expect(p90).toBeLessThan(1.05);
    } finally {
      vi.useRealTimers();
    }
  });

  it('scores each start against the P90 published before it, says so in its record, and keeps the margin across a restart', async () => {
    vi.useFakeTimers({ toFake: ['Date'], now: 1_000_000 });
    try {
      const path = fresh();
      const log = captureLogger();
      const l = ledger({ path, hasStore: false, logger: log.logger });
      for (let i = 0; i < 10; i++) launchedAndReady(l, shard(`q${i}`, Date.now() - 1000));
      launchedAndReady(l, shard('slow', Date.now() - 3000));
      const rec = log.records.filter((r) => r.msg === 'time to READY measured');
      expect(rec[0]?.overP90).toBeUndefined();
      expect(rec[1]).toMatchObject({ ms: 1000, p90Before: 1000, overP90: false });
      expect(rec.at(-1)).toMatchObject({ ms: 3000, p90Before: 1000, overP90: true });
      const widened = l.report([], [])[0]?.learned[0]?.p90Seconds ?? 0;
      // 11 samples: the 11th (3 s) is the slowest and the conformal rank's pick, times the margin of one miss.
      expect(widened).toBeCloseTo(3 * 1.045, 3);
      await l.flushed();
      const again = ledger({ path, hasStore: false, logger: captureLogger().logger });
      expect(again.report([], [])[0]?.learned[0]?.p90Seconds).toBeCloseTo(widened, 6);
      // A file from an agent before the margin: read as no margin.
      const old = fresh();
      writeFileSync(old, JSON.stringify({ version: 1, entries: [{ model: 'acme/chat', engine: 'vllm', profile: 'chat-tp1', updatedAtMs: 1, samples: { store: [1000, 2000] } }] }));
      expect(ledger({ path: old, hasStore: false, logger: captureLogger().logger }).report([], [])[0]?.learned[0]?.p90Seconds).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('WarmthLedger: GPU memory at READY (issue 51)', () => {
  it('learns the memory on the shard GPUs at READY beside the time, its median over the last starts, kept across a restart; nothing when the reading fails', async () => {
    const path = fresh();
    const readings = [70_003, 70_100, 69_900, undefined];
    const asked: number[][] = [];
    const learned: number[] = [];
    const l = ledger({
      path,
      hasStore: false,
      logger: captureLogger().logger,
      onLearned: () => learned.push(1),
      gpuMemoryMib: async (gpus) => {
        asked.push([...gpus]);
        return readings.shift();
      },
    });
    expect(l.report([], [])).toEqual([]);
    const now = Date.now();
    for (const [i, id] of ['a', 'b', 'c', 'd'].entries()) {
      const before = learned.length;
      launchedAndReady(l, shard(id, now - 100));
      // Told once, time and memory together once the read has answered; the time alone for the reading that failed.
      await until(() => learned.length === before + 1 && asked.length === i + 1, `READY ${id} learned`);
      expect(l.report([], [])[0]?.gpuMemoryAtReadyGpus).toBe(1);
    }
    expect(asked).toEqual([[0], [0], [0], [0]]);
    const [w] = l.report([], []);
    expect(w).toMatchObject({ gpuMemoryAtReadyMib: 70_003, gpuMemoryAtReadyGpus: 1 });
    await l.flushed();
    const again = ledger({ path, hasStore: false, logger: captureLogger().logger });
    expect(again.report([], [])[0]).toMatchObject({ gpuMemoryAtReadyMib: 70_003, gpuMemoryAtReadyGpus: 1 });
    // A ledger that cannot read GPU memory reports 0 on 0 GPUs: never measured.
    const blind = ledger({ path: fresh(), hasStore: false, logger: captureLogger().logger });
    launchedAndReady(blind, shard('e', now - 100));
    expect(blind.report([], [])[0]).toMatchObject({ gpuMemoryAtReadyMib: 0, gpuMemoryAtReadyGpus: 0 });
  });
});

describe('WarmthLedger: one Inventory for a READY (bench 16: two each held READY statuses behind them)', () => {
  /** A ledger whose GPU memory reads answer when the test says. */
  function gatedReads() {
    const answers: ((mib: number | undefined) => void)[] = [];
    const learned: string[] = [];
    const l = ledger({
      path: fresh(),
      hasStore: false,
      logger: captureLogger().logger,
      onLearned: () => learned.push(`gpus ${l.report([], [])[0]?.gpuMemoryAtReadyGpus}`),
      gpuMemoryMib: () => new Promise((resolve) => answers.push(resolve)),
    });
    return { l, learned, answers };
  }

  it('tells the time with the memory once the read answers, not before', async () => {
    const { l, learned, answers } = gatedReads();
    launchedAndReady(l, shard('a', Date.now() - 100));
    await until(() => answers.length === 1, 'the memory read asked');
    expect(learned).toEqual([]);
    answers[0]?.(70_000);
    await until(() => learned.length > 0, 'told');
    expect(learned).toEqual(['gpus 1']);
  });

  it(`tells the time alone when the read has not answered in ${MEMORY_TELL_WAIT_MS} ms, then again with the memory`, async () => {
    const { l, learned, answers } = gatedReads();
    const readyAtMs = Date.now();
    launchedAndReady(l, shard('a', readyAtMs - 100));
    await until(() => learned.length === 1, 'the time told alone', 20_000);
    expect(Date.now() - readyAtMs).toBeGreaterThanOrEqual(MEMORY_TELL_WAIT_MS - 5);
    expect(learned).toEqual(['gpus 0']);
    answers[0]?.(70_000);
    await until(() => learned.length === 2, 'the memory told');
    expect(learned).toEqual(['gpus 0', 'gpus 1']);
  });

  it('tells a READY with no memory to read (no GPU, or no reader) at once, and one whose read fails once', async () => {
    const { l, learned, answers } = gatedReads();
    const noGpu = shardSnapshot('cpu', { spec: create(StartShardSchema, { shardId: 'cpu', replicaId: 'r', gpuIndices: [], profile: { name: 'p', engine: 'vllm', model: 'acme/cpu' } }), startedAtMs: Date.now() - 100 });
    launchedAndReady(l, noGpu);
    expect(learned).toHaveLength(1);
    launchedAndReady(l, shard('a', Date.now() - 100));
    await until(() => answers.length === 1, 'the memory read asked');
    answers[0]?.(undefined);
    await until(() => learned.length === 2, 'told');
    await new Promise((r) => setTimeout(r, MEMORY_TELL_WAIT_MS + 200));
    expect(learned).toHaveLength(2);
  });
});
