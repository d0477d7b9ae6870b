import { errorMessage } from '../../../lib/errors.js';
import { type FailureGpuEvent, type FailureRecord, writeFailureRecord } from '../../../lib/files/failure-record.js';
import { tailFile } from '../../../lib/files/tail-file.js';
import type { Logger } from '../../../lib/logger.js';
import { shardFailurePath } from '../../../lib/shard-layout.js';
import type { ShardSnapshot } from './shard-snapshot.js';
import { readFile, stat } from 'node:fs/promises';

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

/**
 * The failure record beside the shard's log, written before FAILED is
 * reported so that whoever hears FAILED (and restarts the shard, which
 * moves both to previous-runs/) finds it. A failure to write is logged: the
 * report carries the same facts.
 */
export async function recordShardFailure(opts: { logDir: string; logPath: string; log: Logger }, record: FailureRecord): Promise<void> {
  const path = shardFailurePath(opts.logDir, record.shardId);
  try {
    // The log's group (admin.group, set by prepareLogFile): whoever may read the log may read how it ended.
    const gid = (await stat(opts.logPath).catch(() => undefined))?.gid;
    await writeFailureRecord(path, record, gid);
  } catch (err) {
    opts.log.warn({ shard: record.shardId, file: path, err: errorMessage(err) }, 'could not write the failure record');
  }
}

/** Log lines kept in lastOutput when a shard fails or exits. */
export const LAST_OUTPUT_LINES = 20;

/** The engine's last words from its log, for a failure report; [] when the log cannot be read (a report without them beats none). */
export function readLastOutput(logPath: string): Promise<string[]> {
  return tailFile(logPath, LAST_OUTPUT_LINES).catch(() => []);
}

/** How far back before a failure the GPU events of its GPUs are kept in its record. */
export const FAILURE_GPU_EVENT_WINDOW_MS = 60_000;

/**
 * Adds `events` (the shard's GPUs' events of the minute before it failed) to
 * the failure record the runner has just written. Done by the agent, which
 * holds the health watch, as it hears FAILED: the supervisor knows no GPU
 * health. A restart of the shard moves the record to previous-runs/ only
 * after a StartShard round trip, so the record is still in place; if not
 * (or unreadable), that is logged and the record stays as it was.
 */
export async function addGpuEventsToFailureRecord(opts: { logDir: string; log: Logger }, shardId: string, events: FailureGpuEvent[]): Promise<void> {
  if (events.length === 0) return;
  const path = shardFailurePath(opts.logDir, shardId);
  try {
    const record = JSON.parse(await readFile(path, 'utf8')) as FailureRecord;
    if (record.shardId !== shardId) return;
    record.gpuEvents = events;
    await writeFailureRecord(path, record, (await stat(path)).gid);
  } catch (err) {
    opts.log.warn({ shard: shardId, file: path, err: errorMessage(err) }, 'could not add the GPU events to the failure record');
  }
}
