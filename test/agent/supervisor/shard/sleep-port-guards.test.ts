import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../../../src/agent/config/agent-config.js';
import type { LaunchPlan } from '../../../../src/agent/engines/launch-plan.js';
import { needsSleepPortGuard, type PortGuard, SleepPortGuards } from '../../../../src/agent/supervisor/shard/sleep-port-guards.js';
import type { ShardSnapshot } from '../../../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState, type StartShard, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { shardSnapshot } from '../../../helpers/shard-snapshot.js';

/*
 * Which ports a sleep-mode shard has guarded, and when the guard is lifted.
 * The guard here is the PortGuard a test stands in with (its interface says
 * so); test/security/sleep-port-guard.test.ts holds the nftables one to the
 * same rules with real connections.
 */

const AGENT_UID = 1000;

function spec(id: string, over: { engine?: string; sleepMode?: boolean; httpPort?: number; nnodes?: number; rank?: number } = {}): StartShard {
  return create(StartShardSchema, {
    shardId: id, replicaId: `r-${id}`, httpPort: over.httpPort ?? 8100, nnodes: over.nnodes ?? 1, rank: over.rank ?? 0,
    profile: { engine: over.engine ?? 'vllm', model: 'm', sleepMode: over.sleepMode ?? true },
  });
}

/** A guard that records what it was asked, and fails when told to. */
class RecordingGuard implements PortGuard {
  readonly calls: string[] = [];
  failWith: string | undefined;
  async guard(port: number, uids: readonly number[]): Promise<void> {
    this.calls.push(`guard ${port} ${uids.join(',')}`);
    if (this.failWith) throw new Error(this.failWith);
  }
  async release(port: number): Promise<void> {
    this.calls.push(`release ${port}`);
  }
}

function guards(o: { sleepPortGuard?: 'nftables' | 'none'; shards?: ShardSnapshot[] } = {}) {
  const guard = new RecordingGuard();
  const { logger, records } = captureLogger();
  const engines = { vllm: { sleepPortGuard: o.sleepPortGuard ?? 'nftables' }, sglang: { sleepPortGuard: o.sleepPortGuard ?? 'nftables' } } as unknown as AgentConfig['engines'];
  const g = new SleepPortGuards({ engines, agentUid: AGENT_UID, guard, shards: () => o.shards ?? [], log: logger });
  return { g, guard, records };
}

const plan = (uid?: number) => (uid === undefined ? {} : { user: { uid } }) as unknown as LaunchPlan;
const ended = (s: StartShard, running = false): ShardSnapshot => shardSnapshot(s.shardId, { spec: s, state: ShardState.STOPPED, running });
const endOf = (s: StartShard, running = false) => ({ shard: ended(s, running), from: ShardState.STOPPING, to: ShardState.STOPPED, why: 'stopped' });
const settle = () => new Promise((r) => setImmediate(r));

describe('needsSleepPortGuard', () => {
  it('guards a sleep-mode vLLM or SGLang shard that serves HTTP on a port', () => {
    expect(needsSleepPortGuard(spec('a'))).toBe(true);
    expect(needsSleepPortGuard(spec('a', { engine: 'sglang' }))).toBe(true);
  });

  it.each([
    ['without sleep mode', { sleepMode: false }],
    ['of an engine whose sleep opens nothing (sim)', { engine: 'sim' }],
    ['of an engine this build does not know', { engine: 'trtllm' }],
    ['with no port', { httpPort: 0 }],
    ['of a rank that serves no HTTP (rank 1 of 2)', { nnodes: 2, rank: 1 }],
  ])('leaves a shard %s alone', (_what, over) => {
    expect(needsSleepPortGuard(spec('a', over))).toBe(false);
  });
});

describe('SleepPortGuards', () => {
  it("guards the port for the agent's and the engine's uids before the launch", async () => {
    const { g, guard } = guards();
    await g.beforeLaunch(spec('a'), plan(2000));
    expect(guard.calls).toEqual([`guard 8100 ${AGENT_UID},2000`]);
  });

  it('refuses the start in one line naming the way out when the guard cannot be set; never runs open', async () => {
    const { g, guard } = guards();
    guard.failWith = 'nft: Operation not permitted';
    await expect(g.beforeLaunch(spec('a'), plan())).rejects.toThrow(
      /^shard a: sleep_mode opens vLLM's dev endpoints .* on port 8100 without a key, .*\(nft: Operation not permitted\); .*engines\.vllm\.sleep_port_guard: none/,
    );
  });

  it('sets no guard, and says so, where the operator set sleep_port_guard: none', async () => {
    const { g, guard, records } = guards({ sleepPortGuard: 'none' });
    await g.beforeLaunch(spec('a'), plan());
    expect(guard.calls).toEqual([]);
    expect(records.some((r) => String(r.msg).includes('engines.vllm.sleep_port_guard is none'))).toBe(true);
  });

  it("lifts a guard left on a new shard's port that needs none, but never one it set for a live shard", async () => {
    const { g, guard } = guards();
    await g.beforeLaunch(spec('plain', { sleepMode: false, httpPort: 8200 }), plan());
    expect(guard.calls).toEqual(['release 8200']);
    await g.beforeLaunch(spec('a'), plan());
    await g.beforeLaunch(spec('b', { sleepMode: false }), plan());
    expect(guard.calls).toEqual(['release 8200', `guard 8100 ${AGENT_UID},${AGENT_UID}`]);
  });

  it('lifts the guard once the shard has ended and its engine is gone', async () => {
    const a = spec('a');
    const { g, guard } = guards();
    await g.beforeLaunch(a, plan());
    g.follow({ ...endOf(a), from: ShardState.READY, to: ShardState.STOPPING });
    g.follow(endOf(a, true));
    await settle();
    expect(guard.calls, 'not while stopping, nor while its engine still runs').toHaveLength(1);
    g.follow(endOf(a));
    await settle();
    expect(guard.calls.at(-1)).toBe('release 8100');
  });

  it('keeps the guard when another live shard holds the port now, or a newer shard was guarded on it', async () => {
    const a = spec('a');
    const b = spec('b');
    const live = shardSnapshot('b', { spec: b, state: ShardState.READY });
    const first = guards({ shards: [live] });
    await first.g.beforeLaunch(a, plan());
    first.g.follow(endOf(a));
    await settle();
    expect(first.guard.calls).toHaveLength(1);

    const second = guards();
    await second.g.beforeLaunch(a, plan());
    await second.g.beforeLaunch(b, plan());
    second.g.follow(endOf(a));
    await settle();
    expect(second.guard.calls.filter((c) => c.startsWith('release'))).toEqual([]);
  });

  it('does not lift anything for a shard that needed no guard', async () => {
    const { g, guard } = guards();
    g.follow(endOf(spec('plain', { sleepMode: false })));
    await settle();
    expect(guard.calls).toEqual([]);
  });
});

