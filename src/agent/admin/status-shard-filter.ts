import type { StatusRequest, StatusResponse } from '../../gen/llmgw/v1/admin_pb.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/**
 * The shards a Status request asks for: `states` when given; else every
 * shard with `all`; else all but those that ended and whose engine is gone.
 * An ended shard whose engine may still run (FAILED, not ready in time, left
 * for the control plane to stop) holds its GPUs, so it stays listed.
 */
export function filterStatusShards(res: StatusResponse, req: Pick<StatusRequest, 'all' | 'states'>, snapshots: readonly ShardSnapshot[]): StatusResponse {
  const shown = new Set(
    snapshots
      .filter((s) => (req.states.length > 0 ? req.states.includes(s.state) : req.all || !isTerminal(s.state) || s.running))
      .map((s) => s.shardId as string),
  );
  res.shards = res.shards.filter((sh) => shown.has(sh.shardId));
  return res;
}
