import { lchown } from 'node:fs/promises';
import { writeFileAtomic } from '../write-file-atomic.js';
import { LOG_FILE_MODE } from './log-file-modes.js';

/**
 * How one run of a shard's engine failed, kept beside its log
 * (`shards/<id>.failure.json`, then `previous-runs/<id>.<n>.failure.json`):
 * the ShardStatus that carried it is gone once the control plane restarts
 * the shard, and an operator looking at a crash loop needs each run's end.
 */
export interface FailureRecord {
  shardId: string;
  replicaId: string;
  pid: number;
  /** 128+n when killed by signal n; null when the engine was not our child (adopted) and its status is unknown. */
  exitCode: number | null;
  signal: string | null;
  /** The ShardStatus.error that reported it, e.g. "engine exited with code 3". */
  error: string;
  /** When the failure was seen, ISO 8601. */
  at: string;
  startedAt: string;
  lastOutput: string[];
  /**
   * The GPU events (faults, Xids, their clearing) of the shard's GPUs in the
   * minute before the failure, oldest first: an engine that died of its GPU
   * says so here. Absent when there were none.
   */
  gpuEvents?: FailureGpuEvent[];
}

/** One GPU event in a failure record. */
export interface FailureGpuEvent {
  gpu: number;
  /** GpuEventKind's name: XID, GPU_LOST, ECC_DOUBLE_BIT, … */
  kind: string;
  xid: number;
  message: string;
  source: string;
  /** ISO 8601. */
  at: string;
}

/**
 * Written atomically: a record cut short by a crash of the agent is worse
 * than none. LOG_FILE_MODE and the log's group `gid`, as the log itself:
 * lastOutput is engine output (prompts, tokens), not for every local user.
 */
export async function writeFailureRecord(path: string, record: FailureRecord, gid?: number): Promise<void> {
  await writeFileAtomic(path, `${JSON.stringify(record, null, 2)}\n`, LOG_FILE_MODE);
  if (gid !== undefined) await lchown(path, -1, gid);
}
