import type { FailureRecord } from '../../../lib/files/failure-record.js';
import type { ShardSnapshot } from './shard-snapshot.js';

/** The failure record of a shard as it is now (recordShardFailure writes it), seen at `at`. */
export function shardFailureRecord(shard: ShardSnapshot, at: Date): FailureRecord {
  return {
    shardId: shard.shardId,
    replicaId: shard.replicaId,
    pid: shard.pid,
    exitCode: shard.exitCode,
    signal: shard.signal,
    error: shard.error,
    at: at.toISOString(),
    startedAt: new Date(shard.startedAtMs).toISOString(),
    lastOutput: shard.lastOutput,
  };
}
