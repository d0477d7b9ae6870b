import { stat } from 'node:fs/promises';
import { errorMessage } from '../../../lib/errors.js';
import { type FailureRecord, writeFailureRecord } from '../../../lib/files/failure-record.js';
import type { Logger } from '../../../lib/logger.js';
import { shardFailurePath } from '../../../lib/shard-layout.js';

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
