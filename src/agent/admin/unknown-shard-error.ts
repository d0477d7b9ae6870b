import { Code, ConnectError } from '@connectrpc/connect';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/**
 * NotFound for a shard this agent does not supervise, listing the ones it
 * does: a typo is then fixed from the message alone.
 */
export function unknownShardError(id: string, nodeId: string, known: readonly ShardSnapshot[]): ConnectError {
  const ids = known.map((s) => s.shardId).sort();
  const list = ids.length > 0 ? `known shards: ${ids.join(', ')}` : 'it supervises no shards';
  return new ConnectError(`no shard ${JSON.stringify(id)} on node ${nodeId}; ${list}`, Code.NotFound);
}
