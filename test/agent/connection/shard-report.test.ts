import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ProfileSchema, ShardState, StartShardSchema, type StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { refusedStatus, runningShardFromSnapshot, statusFromSnapshot } from '../../../src/agent/connection/shard-report.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';

function startSpec(over: Partial<Omit<StartShard, '$typeName' | '$unknown'>> = {}): StartShard {
  return create(StartShardSchema, {
    shardId: 's1',
    replicaId: 'rep-1',
    rank: 0,
    nnodes: 2,
    gpuIndices: [0, 1],
    hcas: ['mlx5_0'],
    httpPort: 18000,
    leaderPort: 29500,
    pool: 'pool-a',
    fabric: 'ib-a',
    profile: create(ProfileSchema, { name: 'tiny', engine: 'vllm', model: 'org/tiny', servedModelName: 'tiny-chat' }),
    ...over,
  });
}

function snapshot(over: Partial<ShardSnapshot> = {}): ShardSnapshot {
  return shardSnapshot('s1', { replicaId: 'rep-1', spec: startSpec(), logPath: '/dev/null', ...over });
}

describe('statusFromSnapshot', () => {
  it('copies the shard fields and names the node', () => {
    const st = statusFromSnapshot(
      'node-7',
      snapshot({ state: ShardState.FAILED, error: 'boom', exitCode: 137, signal: 'SIGKILL', lastOutput: ['a', 'b'], adopted: true }),
    );
    expect(st.nodeId).toBe('node-7');
    expect(st.shardId).toBe('s1');
    expect(st.replicaId).toBe('rep-1');
    expect(st.state).toBe(ShardState.FAILED);
    expect(st.error).toBe('boom');
    expect(st.exitCode).toBe(137);
    expect(st.signal).toBe('SIGKILL');
    expect(st.lastOutput).toEqual(['a', 'b']);
    expect(st.pid).toBe(4242);
    expect(st.adopted).toBe(true);
  });

  it('says of an adopted shard still settling what Register says: its file\'s drain or sleep, until the engine has answered; else its state', () => {
    // Register went out with SLEEPING (registerState): a status before the engine answered must not say otherwise.
    expect(statusFromSnapshot('n', snapshot({ state: ShardState.STARTING, sleepLevel: 1 })).state).toBe(ShardState.SLEEPING);
    expect(statusFromSnapshot('n', snapshot({ state: ShardState.STARTING, drainRequested: true })).state).toBe(ShardState.DRAINING);
    // Found awake (its sleep cleared), or a fresh start: STARTING, the correction of a SLEEPING Register.
    expect(statusFromSnapshot('n', snapshot({ state: ShardState.STARTING, sleepLevel: 0 })).state).toBe(ShardState.STARTING);
    // Settled: the state itself, whatever the facts beside it.
    expect(statusFromSnapshot('n', snapshot({ state: ShardState.READY, sleepLevel: 1 })).state).toBe(ShardState.READY);
    expect(statusFromSnapshot('n', snapshot({ state: ShardState.FAILED, sleepLevel: 2 })).state).toBe(ShardState.FAILED);
  });

  it('sends an unknown exit code as 0 and an unknown signal as empty', () => {
    const st = statusFromSnapshot('n', snapshot({ exitCode: null, signal: null }));
    expect(st.exitCode).toBe(0);
    expect(st.signal).toBe('');
  });
});

describe('refusedStatus', () => {
  it('is a FAILED report with the reason and nothing launched', () => {
    const st = refusedStatus('node-1', { shardId: 's9', replicaId: 'rep-9' }, 'GPU 0 is held by shard s1');
    expect(st.nodeId).toBe('node-1');
    expect(st.shardId).toBe('s9');
    expect(st.replicaId).toBe('rep-9');
    expect(st.state).toBe(ShardState.FAILED);
    expect(st.error).toBe('GPU 0 is held by shard s1');
    expect(st.pid).toBe(0);
    expect(st.exitCode).toBe(0);
    expect(st.adopted).toBe(false);
  });
});

describe('runningShardFromSnapshot', () => {
  it('describes the shard as Register carries it, serving under its served model name', () => {
    const rs = runningShardFromSnapshot(snapshot(), '10.0.0.5');
    expect(rs.shardId).toBe('s1');
    expect(rs.replicaId).toBe('rep-1');
    expect(rs.rank).toBe(0);
    expect(rs.nnodes).toBe(2);
    expect(rs.gpuIndices).toEqual([0, 1]);
    expect(rs.hcas).toEqual(['mlx5_0']);
    expect(rs.httpPort).toBe(18000);
    expect(rs.leaderPort).toBe(29500);
    expect(rs.state).toBe(ShardState.READY);
    expect(rs.model).toBe('tiny-chat');
    expect(rs.profile).toBe('tiny');
    expect(rs.pool).toBe('pool-a');
    expect(rs.fabric).toBe('ib-a');
    expect(rs.engine).toBe('vllm');
    expect(rs.pid).toBe(4242);
  });

  it('falls back to the model when no served name is given', () => {
    const spec = startSpec({ profile: create(ProfileSchema, { name: 'tiny', engine: 'sim', model: 'org/tiny' }) });
    expect(runningShardFromSnapshot(snapshot({ spec }), '').model).toBe('org/tiny');
  });

  it('makes rank 0 without a leader_addr the leader at the management address; other ranks get none', () => {
    expect(runningShardFromSnapshot(snapshot(), '10.0.0.5').leaderAddr).toBe('10.0.0.5');
    const worker = snapshot({ spec: startSpec({ rank: 1 }) });
    expect(runningShardFromSnapshot(worker, '10.0.0.5').leaderAddr).toBe('');
    const given = snapshot({ spec: startSpec({ rank: 1, leaderAddr: 'leader.example' }) });
    expect(runningShardFromSnapshot(given, '10.0.0.5').leaderAddr).toBe('leader.example');
  });

  it('sends a field StartShard would refuse empty, keeping the rest', () => {
    const spec = startSpec({ pool: 'p'.repeat(12 * 1024 * 1024), fabric: 'ib\u001b[31m' });
    const rs = runningShardFromSnapshot(snapshot({ spec }), '10.0.0.5');
    expect(rs.pool).toBe('');
    expect(rs.fabric).toBe('');
    expect(rs.profile).toBe('tiny');
    expect(rs.model).toBe('tiny-chat');
  });

  it('does not replace an unfit served name by the model, which the engine does not answer to', () => {
    const spec = startSpec({ profile: create(ProfileSchema, { name: 'tiny', engine: 'vllm', model: 'org/tiny', servedModelName: 'x'.repeat(300) }) });
    expect(runningShardFromSnapshot(snapshot({ spec }), '').model).toBe('');
  });

  it('drops every HCA when one entry is unfit, and an oversized replica id or engine', () => {
    const spec = startSpec({ hcas: ['mlx5_0', 'mlx5_1,^mlx5_2'], profile: create(ProfileSchema, { engine: 'e'.repeat(300), model: 'm' }) });
    const rs = runningShardFromSnapshot(snapshot({ spec, replicaId: 'r'.repeat(300) }), '');
    expect(rs.hcas).toEqual([]);
    expect(rs.replicaId).toBe('');
    expect(rs.engine).toBe('');
    expect(rs.gpuIndices).toEqual([0, 1]);
  });

  it('drops an unfit leader_addr and falls back to the management address on rank 0', () => {
    const spec = startSpec({ leaderAddr: 'not a host!' });
    expect(runningShardFromSnapshot(snapshot({ spec }), '10.0.0.5').leaderAddr).toBe('10.0.0.5');
  });
});
