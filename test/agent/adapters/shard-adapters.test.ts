import { create } from '@bufbuild/protobuf';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AdapterSpecSchema, AdapterState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { AdapterLedger } from '../../../src/agent/adapters/adapter-ledger.js';
import type { AdapterEngineCalls, AdapterStoreCalls, ResolvedAdapter } from '../../../src/agent/adapters/adapter-ports.js';
import type { Proof } from '../../../src/agent/adapters/prove-adapter.js';
import { ShardAdapters } from '../../../src/agent/adapters/shard-adapters.js';
import { silentLogger } from '../../../src/lib/logger.js';

/*
 * The reconciler with plain objects standing in for the engine's adapter
 * API and the store (adapter-ports.ts): what it asks of each, in order.
 */

const dirs: string[] = [];
const ledgers: AdapterLedger[] = [];
afterEach(async () => {
  // Each ledger's last write ends before its dir is removed, never beside it.
  for (const l of ledgers.splice(0)) await l.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const ledgerIn = (dir: string) => {
  const l = new AdapterLedger(join(dir, 'ledger.json'));
  ledgers.push(l);
  return l;
};

const spec = (name: string, repo = `org/${name}`, revision = 'main') => create(AdapterSpecSchema, { name, repo, revision });

function fakeEngine(opts: { maxLoaded?: number; refuse?: string; forgetsUnload?: boolean; dropsLoad?: boolean } = {}) {
  const loaded = new Set<string>();
  const inFlight = new Map<string, { running: number; waiting: number }>();
  const calls: string[] = [];
  const engine: AdapterEngineCalls = {
    async load(name) {
      calls.push(`load ${name}`);
      if (opts.refuse) throw Object.assign(new Error('400'), { engineReason: opts.refuse });
      if (!opts.dropsLoad) loaded.add(name);
    },
    async unload(name) {
      calls.push(`unload ${name} busy=${(inFlight.get(name)?.running ?? 0) + (inFlight.get(name)?.waiting ?? 0)}`);
      if (!opts.forgetsUnload) loaded.delete(name);
    },
    async list() {
      return [...loaded];
    },
    async inFlight() {
      return inFlight;
    },
  };
  return { engine, loaded, inFlight, calls };
}

function fakeStore(adapters: Record<string, Partial<ResolvedAdapter>>, pullable: Record<string, Partial<ResolvedAdapter>> = {}) {
  const pins = new Set<string>();
  const calls: string[] = [];
  const full = (repo: string, a: Partial<ResolvedAdapter>): ResolvedAdapter => ({ repo, revision: 'main', commit: 'c'.repeat(40), dir: `/store/${repo}`, digest: `sha256:${repo}`, baseModel: 'org/base', rank: 8, bytes: 1, ...a });
  const store: AdapterStoreCalls = {
    async resolve(repo) {
      const a = adapters[repo];
      if (!a) throw new Error(`adapter ${repo} is not in the store; pull it`);
      return full(repo, a);
    },
    async pull(repo) {
      calls.push(`pull ${repo}`);
      const a = pullable[repo];
      if (!a) throw new Error(`${repo}: 404 from the hub`);
      adapters[repo] = a;
    },
    async pin(repo, holder) {
      pins.add(`${repo}:${holder}`);
    },
    async unpin(repo, holder) {
      pins.delete(`${repo}:${holder}`);
    },
  };
  return { store, pins, calls };
}

function reconciler(engine: AdapterEngineCalls, store: AdapterStoreCalls, opts: { prove?: (name: string) => Proof; ledger?: AdapterLedger; shardId?: string; maxLoaded?: number; onUnload?: (n: string) => void; drainMs?: number } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-adapters-'));
  dirs.push(dir);
  let changes = 0;
  const r = new ShardAdapters({
    shardId: opts.shardId ?? 's1',
    engine,
    store,
    ledger: opts.ledger ?? ledgerIn(dir),
    limits: { maxLoaded: opts.maxLoaded ?? 4, maxRank: 16 },
    baseModels: ['org/base'],
    prove: async (name) => opts.prove?.(name) ?? { kind: 'proven', how: 'answers "x"', answer: 'x' },
    onChange: () => changes++,
    onUnload: opts.onUnload,
    log: silentLogger,
    signal: new AbortController().signal,
    drainMs: opts.drainMs ?? 2000,
    drainPollMs: 10,
  });
  return { r, changes: () => changes, dir };
}

const states = (r: ShardAdapters) => Object.fromEntries(r.statuses().map((s) => [s.name, AdapterState[s.state]]));

describe('ShardAdapters', () => {
  it('loads each desired adapter, pinned in the store, and reports it LOADED once proven', async () => {
    const e = fakeEngine();
    const s = fakeStore({ 'org/a': {}, 'org/b': {} });
    const { r } = reconciler(e.engine, s.store);
    await r.set([spec('a'), spec('b')]);
    expect(states(r)).toEqual({ a: 'LOADED', b: 'LOADED' });
    expect([...e.loaded].sort()).toEqual(['a', 'b']);
    expect([...s.pins].sort()).toEqual(['org/a:s1', 'org/b:s1']);
    expect(r.statuses()[0]?.proven).toBe(true);
    expect(r.statuses()[0]?.loadMs).toBeGreaterThan(0);
  });

  it('pulls an adapter missing from the store before loading it, and fails it with the pull\'s reason when the pull fails', async () => {
    const e = fakeEngine();
    const s = fakeStore({}, { 'org/a': {} });
    const { r } = reconciler(e.engine, s.store);
    await r.set([spec('a'), spec('gone')]);
    expect(s.calls).toEqual(['pull org/a', 'pull org/gone']);
    expect(states(r)).toEqual({ a: 'LOADED', gone: 'FAILED' });
    expect(r.statuses().find((x) => x.name === 'gone')?.reason).toContain('404 from the hub');
    expect(e.calls).toEqual(['load a']);
  });

  it('refuses an adapter of another base or a rank over the limit without asking the engine', async () => {
    const e = fakeEngine();
    const s = fakeStore({ 'org/a': { baseModel: 'org/other' }, 'org/b': { rank: 64 } });
    const { r } = reconciler(e.engine, s.store);
    await r.set([spec('a'), spec('b')]);
    expect(states(r)).toEqual({ a: 'FAILED', b: 'FAILED' });
    const reasons = r.statuses().map((x) => x.reason);
    expect(reasons[0]).toContain('is for base model "org/other"');
    expect(reasons[1]).toContain('rank 64, above the shard\'s max_adapter_rank 16');
    expect(e.calls).toEqual([]);
  });

  it('refuses a name another shard holds with other bytes; the same bytes under the same name are fine', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-ledger-'));
    dirs.push(dir);
    const ledger = ledgerIn(dir);
    const one = reconciler(fakeEngine().engine, fakeStore({ 'org/a': {} }).store, { ledger, shardId: 's1' }).r;
    await one.set([spec('a')]);
    const e2 = fakeEngine();
    const two = reconciler(e2.engine, fakeStore({ 'org/a2': {}, 'org/a': {} }).store, { ledger, shardId: 's2' }).r;
    await two.set([spec('a', 'org/a2')]);
    expect(states(two)).toEqual({ a: 'FAILED' });
    expect(two.statuses()[0]?.reason).toMatch(/adapter name a is loaded on shard s1 with other bytes/);
    expect(e2.calls).toEqual([]);
    await two.set([spec('a', 'org/a')]);
    expect(states(two)).toEqual({ a: 'LOADED' });
    // Read back by a restarted agent.
    expect(new AdapterLedger(join(dir, 'ledger.json')).conflict('a', 'sha256:other', 's3')).toMatch(/loaded on shard s1/);
  });

  it('reports the engine\'s own reason when it refuses a load, and unpins', async () => {
    const e = fakeEngine({ refuse: 'LoRA rank 64 is greater than max_lora_rank 16.' });
    const s = fakeStore({ 'org/a': {} });
    const { r } = reconciler(e.engine, s.store);
    await r.set([spec('a')]);
    expect(r.statuses()[0]?.state).toBe(AdapterState.FAILED);
    expect(r.statuses()[0]?.reason).toBe('the engine refused the load: LoRA rank 64 is greater than max_lora_rank 16.');
    expect(s.pins.size).toBe(0);
  });

  it('fails a load the engine answered but does not list (silently absent), never LOADED', async () => {
    const e = fakeEngine({ dropsLoad: true });
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {} }).store);
    await r.set([spec('a')]);
    expect(r.statuses()[0]?.state).toBe(AdapterState.FAILED);
    expect(r.statuses()[0]?.reason).toContain('does not list it');
  });

  it('fails an adapter whose proof fails, with the proof\'s reason; an unproven one is LOADED and proven at a later pass', async () => {
    const e = fakeEngine();
    let busy = true;
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {}, 'org/b': {} }).store, {
      prove: (name) => (name === 'a' ? { kind: 'failed', reason: 'a answers "9, 10" as the base model does' } : busy ? { kind: 'unproven', reason: 'unproven: b did not answer (503)' } : { kind: 'proven', how: 'ok', answer: 'y' }),
    });
    await r.set([spec('a'), spec('b')]);
    expect(states(r)).toEqual({ a: 'FAILED', b: 'LOADED' });
    expect(r.statuses()[1]).toMatchObject({ proven: false, reason: 'unproven: b did not answer (503)' });
    busy = false;
    await r.reconcile();
    expect(r.statuses()[1]).toMatchObject({ proven: true, state: AdapterState.LOADED });
    // The failed one is not loaded again by every pass.
    expect(e.calls.filter((c) => c === 'load a')).toHaveLength(1);
  });

  it('unloads an adapter only once the engine\'s requests naming it have ended, then checks it is gone and unpins', async () => {
    const e = fakeEngine();
    const s = fakeStore({ 'org/a': {}, 'org/b': {} });
    const unloaded: string[] = [];
    const { r } = reconciler(e.engine, s.store, { onUnload: (n) => unloaded.push(n) });
    await r.set([spec('a'), spec('b')]);
    e.inFlight.set('a', { running: 2, waiting: 1 });
    const done = r.set([spec('b')]);
    await new Promise((res) => setTimeout(res, 100));
    expect(states(r).a).toBe('UNLOADING');
    expect(e.calls.some((c) => c.startsWith('unload a'))).toBe(false);
    e.inFlight.set('a', { running: 0, waiting: 0 });
    await done;
    expect(e.calls).toContain('unload a busy=0');
    expect(states(r)).toEqual({ b: 'LOADED' });
    expect([...s.pins]).toEqual(['org/b:s1']);
    expect(unloaded).toEqual(['a']);
  });

  it('defers an unload whose requests outlast the drain bound, never forcing it', async () => {
    const e = fakeEngine();
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {} }).store, { drainMs: 200 });
    await r.set([spec('a')]);
    e.inFlight.set('a', { running: 1, waiting: 0 });
    await r.set([]);
    expect(states(r)).toEqual({ a: 'UNLOADING' });
    expect(r.statuses()[0]?.reason).toMatch(/1 request still name it after 0 s; unload deferred/);
    expect(e.loaded.has('a')).toBe(true);
  });

  it('fails an unload the engine answered but that leaves the adapter listed (a frontend-only unload)', async () => {
    const e = fakeEngine({ forgetsUnload: true });
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {} }).store);
    await r.set([spec('a')]);
    await r.set([]);
    expect(states(r)).toEqual({ a: 'FAILED' });
    expect(r.statuses()[0]?.reason).toContain('still lists it');
  });

  it('waits for a free slot rather than load beyond the engine\'s limit', async () => {
    const e = fakeEngine();
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {}, 'org/b': {} }).store, { maxLoaded: 1, drainMs: 100 });
    await r.set([spec('a')]);
    e.inFlight.set('a', { running: 1, waiting: 0 });
    await r.set([spec('b')]);
    expect(states(r)).toEqual({ a: 'UNLOADING', b: 'LOADING' });
    expect(r.statuses()[1]?.reason).toContain('waiting for a free slot');
    e.inFlight.clear();
    await r.reconcile();
    expect(states(r)).toEqual({ b: 'LOADED' });
  });

  it('loads again what the engine no longer lists (an engine restart, an eviction) and proves without loading what it already lists (adoption)', async () => {
    const e = fakeEngine();
    const { r } = reconciler(e.engine, fakeStore({ 'org/a': {}, 'org/b': {} }).store);
    await r.set([spec('a')]);
    e.loaded.clear();
    await r.reconcile();
    expect(e.calls).toEqual(['load a', 'load a']);
    e.loaded.add('b');
    const adopted = reconciler(e.engine, fakeStore({ 'org/a': {}, 'org/b': {} }).store).r;
    await adopted.set([spec('a'), spec('b')]);
    expect(states(adopted)).toEqual({ a: 'LOADED', b: 'LOADED' });
    expect(e.calls).toEqual(['load a', 'load a']);
  });

  it('unloads an adapter the engine serves that nobody asked for', async () => {
    const e = fakeEngine();
    e.loaded.add('stray');
    const { r } = reconciler(e.engine, fakeStore({}).store);
    await r.set([]);
    expect(e.calls).toEqual(['unload stray busy=0']);
    expect(r.statuses()).toEqual([]);
  });
});
