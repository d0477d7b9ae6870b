import type { ReplicaView } from '../control/replica-view.js';
import { shardLogPath } from '../lib/shard-layout.js';
import { readLogTail } from './read-log-tail.js';

/** Engine log lines quoted for a replica that is not ready: enough for a traceback's last frame and its error. */
export const WAITING_LOG_LINES = 6;

/**
 * What `dev up` says about a replica that is not ready yet: its phase, each
 * shard's state, why it was last stopped, and the end of each engine's log
 * (read from the file, as `ctl logs` would). The log is the answer a
 * newcomer needs; a spinner alone was the complaint.
 */
export function describeWaitingReplica(r: ReplicaView, logDir: string, waitedMs: number): string[] {
  const shards = r.shards.map((s) => `${s.shardId} ${s.stateName}${s.gpuIndices.length ? ` on GPU ${s.gpuIndices.join(',')}` : ''}`);
  const head =
    `${r.id} not ready after ${Math.round(waitedMs / 1000)} s: ${r.phase}` +
    (shards.length ? `, shard ${shards.join('; ')}` : '') +
    (r.generation > 1 ? ` (generation ${r.generation})` : '') +
    // A first generation that is starting was placed: why it could not be placed before is history.
    (r.lastError && (r.phase !== 'starting' || r.generation > 1) ? `; last error: ${r.lastError}` : '');
  const lines = [head];
  for (const s of r.shards) {
    const path = shardLogPath(logDir, s.shardId);
    const tail = readLogTail(path, WAITING_LOG_LINES);
    if ('problem' in tail) {
      lines.push(`  ${path}: ${tail.problem}`);
      continue;
    }
    lines.push(`  the end of ${path}:`, ...tail.lines.map((l) => `    ${l}`));
  }
  return lines;
}
