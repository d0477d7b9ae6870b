import { create } from '@bufbuild/protobuf';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AdapterEngineCalls, AdapterStoreCalls } from '../../../src/agent/adapters/adapter-ports.js';
import { NodeAdapters } from '../../../src/agent/adapters/node-adapters.js';
import type { ShardReaction } from '../../../src/agent/supervisor/shard/shard-reaction.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { AdapterSpecSchema, ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { silentLogger } from '../../../src/lib/logger.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';

/*
 * The adapters' recheck (an engine that dropped an adapter gets it back
 * within ADAPTER_RECHECK_MS) runs only while some shard has adapters: with
 * none, its timer woke every agent every second for nothing (bench figures
 * 5b and 16). The engine and store are plain objects (adapter-ports.ts).
 */

const RECHECK_MS = 50;
const WAIT = { timeout: 10_000, interval: 10 };
const dirs: string[] = [];
const made: NodeAdapters[] = [];
afterEach(async () => {
  // close() ends once a stop's ledger write has: the dir is removed after it, never beside it.
  for (const a of made.splice(0)) await a.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function node(opts: { maxLoaded: number }) {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-node-adapters-'));
  dirs.push(stateDir);
  const loaded = new Set<string>();
  const engine: AdapterEngineCalls = {
    load: async (name) => void loaded.add(name),
    unload: async (name) => void loaded.delete(name),
    list: async () => [...loaded],
    inFlight: async () => undefined,
  };
  const store: AdapterStoreCalls = {
    resolve: async (repo) => ({ repo, revision: 'main', commit: 'c'.repeat(40), dir: `/store/${repo}`, digest: `sha256:${repo}`, baseModel: 'm', rank: 8, bytes: 1 }),
    pull: async () => {},
    pin: async () => {},
    unpin: async () => {},
  };
  const shards = new Map<string, ShardSnapshot>();
  const reactions: ShardReaction[] = [];
  const adapters = new NodeAdapters({
    stateDir,
    shards: { get: (id) => shards.get(id), react: (r) => reactions.push(r) },
    facts: () => ({ engine: 'vllm', hasApi: true, limits: { maxLoaded: opts.maxLoaded, maxRank: 16 }, modelNames: ['m'] }),
    access: () => ({ engine, prove: async () => ({ kind: 'proven', how: 'answers "x"', answer: 'x' }) }),
    store,
    report: () => {},
    log: silentLogger,
    recheckMs: RECHECK_MS,
  });
  made.push(adapters);
  const transition = (s: ShardSnapshot, to: ShardState) => {
    const from = s.state;
    s.state = to;
    shards.set(s.shardId, s);
    for (const r of reactions) r.on({ shard: s, from, to });
  };
  return { adapters, loaded, transition, stateDir };
}

const withAdapter = (id: string) => {
  const spec = shardSnapshot(id, { state: ShardState.STARTING }).spec;
  spec.adapters = [create(AdapterSpecSchema, { name: 'a', repo: 'org/a', revision: 'main' })];
  return shardSnapshot(id, { state: ShardState.STARTING, spec });
};

describe('NodeAdapters recheck', () => {
  it('runs no timer while no shard has adapters, as on a node whose engines serve no LoRA', () => {
    const { adapters, transition } = node({ maxLoaded: 0 });
    expect(adapters.rechecking).toBe(false);
    transition(shardSnapshot('s1', { state: ShardState.STARTING }), ShardState.READY);
    expect(adapters.rechecking).toBe(false);
    adapters.close();
  });

  it('rechecks a shard with adapters while it lives (a dropped adapter comes back), and stops once it has ended', async () => {
    const { adapters, loaded, transition } = node({ maxLoaded: 4 });
    const s = withAdapter('s1');
    transition(s, ShardState.READY);
    expect(adapters.rechecking).toBe(true);
    await vi.waitFor(() => expect([...loaded]).toEqual(['a']), WAIT);
    // The engine restarted its adapters away: the recheck, not a transition, loads it again.
    loaded.clear();
    await vi.waitFor(() => expect([...loaded]).toEqual(['a']), WAIT);
    transition(s, ShardState.STOPPED);
    expect(adapters.rechecking).toBe(false);
    adapters.close();
  });

  it('stops the recheck on close', () => {
    const { adapters, transition } = node({ maxLoaded: 4 });
    transition(shardSnapshot('s1', { state: ShardState.STARTING }), ShardState.READY);
    expect(adapters.rechecking).toBe(true);
    adapters.close();
    expect(adapters.rechecking).toBe(false);
  });
});

describe('NodeAdapters close', () => {
  const ledgerIn = (stateDir: string) => {
    const dir = join(stateDir, 'adapters');
    return { names: JSON.parse(readFileSync(join(dir, 'ledger.json'), 'utf8')).names, files: readdirSync(dir).sort() };
  };

  it('resolves once the ledger write a stop asked has ended: the file says it, no temp file is left', async () => {
    const { adapters, loaded, transition, stateDir } = node({ maxLoaded: 4 });
    const s = withAdapter('s1');
    transition(s, ShardState.READY);
    await vi.waitFor(() => expect(ledgerIn(stateDir).names).toEqual({ a: { digest: 'sha256:org/a', shards: ['s1'] } }), WAIT);
    expect([...loaded]).toEqual(['a']);
    // The stop lets the name go (a ledger write), and the agent closes at once.
    transition(s, ShardState.STOPPED);
    await adapters.close();
    expect(ledgerIn(stateDir)).toEqual({ names: {}, files: ['ledger.json'] });
  });

  it('writes nothing a stop asks after close, and refuses a set then', async () => {
    const { adapters, transition, stateDir } = node({ maxLoaded: 4 });
    const s = withAdapter('s1');
    transition(s, ShardState.READY);
    await vi.waitFor(() => expect(ledgerIn(stateDir).names).toHaveProperty('a'), WAIT);
    await adapters.close();
    // The shard still serves: the agent going away is the one reason.
    expect(await adapters.set('s1', [])).toEqual({ refused: 'the agent is stopping; set the adapters again once it is back' });
    const before = readFileSync(join(stateDir, 'adapters', 'ledger.json'), 'utf8');
    transition(s, ShardState.STOPPED);
    // close() again resolves once every write asked has ended: none was started.
    await adapters.close();
    expect(readFileSync(join(stateDir, 'adapters', 'ledger.json'), 'utf8')).toBe(before);
  });
});
