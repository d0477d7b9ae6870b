import { describe, expect, it } from 'vitest';
import type { RunnerEngine } from '../../../../src/agent/supervisor/launch/runner-engine.js';
import { UNKNOWN_LOAD } from '../../../../src/agent/supervisor/probes/load-meter.js';
import { newShardLife, type ShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { snapshotShard } from '../../../../src/agent/supervisor/shard/snapshot-shard.js';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { EngineRecord } from '../../../../src/lib/files/state-file.js';
import { shardSnapshot } from '../../../helpers/shard-snapshot.js';

/* A runner's shard as a copy: every field from its record, its life and its launch, and the optional ones absent when they do not hold. */

const base = shardSnapshot('s1');
const record = {
  shardId: base.shardId, replicaId: base.replicaId, spec: base.spec, pid: 4242, servesHttp: true, createdAtMs: 1000, logPath: '/tmp/s1.log', launcher: 'direct',
} as unknown as EngineRecord;
const launched: RunnerEngine = { record, adopted: false, statePath: '/tmp/s1.json' };
const well = { healthy: true, cause: undefined, why: 'answers /health' } as const;

describe('snapshotShard', () => {
  it('copies the record, the life and the launch into one snapshot, optional facts absent', () => {
    const s = snapshotShard(record, newShardLife({ state: ShardState.READY }), launched, '', UNKNOWN_LOAD, undefined);
    expect(s).toEqual({
      ...base, startedAtMs: 1000, drainRequested: false, sleepLevel: 0, launcher: 'direct', unit: '', note: '', load: { ...UNKNOWN_LOAD }, engineVersion: undefined,
    });
    for (const absent of ['endedAtMs', 'modelDigest', 'gangFault', 'stalled']) expect(s, absent).not.toHaveProperty(absent);
  });

  it('is a copy: a later change of the life or the load does not reach a snapshot taken', () => {
    const life = { ...newShardLife({ state: ShardState.FAILED }), lastOutput: ['last words'] };
    const load = { inFlight: 3, tokensPerSecond: 10 };
    const s = snapshotShard(record, life, launched, '', load, '0.9.1');
    (life.lastOutput as string[]).push('more');
    load.inFlight = 9;
    expect([s.lastOutput, s.load?.inFlight, s.engineVersion]).toEqual([['last words'], 3, '0.9.1']);
  });

  it('says how the shard ended, was launched and asleep: ended at, digest, unit, note, level, adoption', () => {
    const life: ShardLife = { ...newShardLife({ state: ShardState.SLEEPING, sleepLevel: 2 }), dead: true, endedAtMs: 5000 };
    const s = snapshotShard(record, life, { ...launched, adopted: true, modelDigest: 'sha256:abc', note: 'adopted from a state file' }, 'llmgw-engine-s1.service', UNKNOWN_LOAD, undefined);
    expect(s).toMatchObject({ running: false, endedAtMs: 5000, modelDigest: 'sha256:abc', adopted: true, note: 'adopted from a state file', unit: 'llmgw-engine-s1.service', sleepLevel: 2 });
  });

  it('marks a stall only on an UNHEALTHY shard whose probe said stalled, not another cause nor another state', () => {
    const stalled = { healthy: false, cause: 'stalled', why: 'no token for 60 s' } as const;
    const sick = { healthy: false, cause: undefined, why: 'probe timed out' } as const;
    const life = (state: ShardState, verdict: ShardLife['health']['verdict']): ShardLife => {
      const l = newShardLife({ state });
      return { ...l, health: { ...l.health, verdict } };
    };
    expect(snapshotShard(record, life(ShardState.UNHEALTHY, stalled), launched, '', UNKNOWN_LOAD, undefined).stalled).toBe(true);
    expect(snapshotShard(record, life(ShardState.UNHEALTHY, sick), launched, '', UNKNOWN_LOAD, undefined)).not.toHaveProperty('stalled');
    expect(snapshotShard(record, life(ShardState.READY, stalled), launched, '', UNKNOWN_LOAD, undefined)).not.toHaveProperty('stalled');
    expect(snapshotShard(record, life(ShardState.READY, well), launched, '', UNKNOWN_LOAD, undefined)).not.toHaveProperty('stalled');
  });

  it('copies a gang fault rather than sharing it', () => {
    const fault = { rank: 0, nodeId: 'node-a', shardId: 'r-g1-0', reason: 'rank 0 on node-a is FAILED', sinceMs: 1, stalled: false };
    const l = newShardLife({ state: ShardState.UNHEALTHY });
    const s = snapshotShard(record, { ...l, health: { ...l.health, gang: fault } }, launched, '', UNKNOWN_LOAD, undefined);
    expect(s.gangFault).toEqual(fault);
    expect(s.gangFault).not.toBe(fault);
  });
});
