import { describe, expect, it } from 'vitest';
import { ShardFailedError, shardFailedError } from '../../../../src/agent/supervisor/shard/shard-failed-error.js';
import { newShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';

/* The error a shard that failed to start or settle is thrown with: the engine's exit, never the CLI's. */

describe('shardFailedError', () => {
  it('carries the error, the exit and a copy of the last output the machine holds', () => {
    const life = { ...newShardLife({ state: ShardState.FAILED }), error: 'engine was killed by SIGKILL while starting', exitCode: 137, signal: 'SIGKILL' as const, lastOutput: ['OOM'] };
    const err = shardFailedError('s1', life);
    expect(err).toBeInstanceOf(ShardFailedError);
    expect(err).toBeInstanceOf(Error);
    expect([err.name, err.message, err.shardId, err.exitCode, err.signal, err.lastOutput]).toEqual([
      'ShardFailedError', 'shard s1: engine was killed by SIGKILL while starting', 's1', 137, 'SIGKILL', ['OOM'],
    ]);
    // A copy: the machine's next life must not change what was thrown.
    life.lastOutput.push('later');
    expect(err.lastOutput).toEqual(['OOM']);
  });

  it('names the state when the shard ended without an error (a stop, an exit), never an empty message', () => {
    expect(shardFailedError('s2', newShardLife({ state: ShardState.STOPPED })).message).toBe('shard s2: STOPPED');
    expect(shardFailedError('s3', newShardLife({ state: ShardState.EXITED })).message).toBe('shard s3: EXITED');
  });

  it('says unknown, not 0 or 1, of an exit it was not told (an adopted engine, a timeout)', () => {
    const err = new ShardFailedError('s4', 'shard s4: not ready in time');
    expect([err.exitCode, err.signal, err.lastOutput]).toEqual([null, null, []]);
  });
});
