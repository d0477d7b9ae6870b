import type { StatusRequest, StatusResponse } from '../../gen/llmgw/v1/admin_pb.js';
import type { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/**
 * The shards a Status request asks for: `states` when given; else every
 * shard with `all`; else all but those that ended and whose engine is gone.
 * An ended shard whose engine may still run (FAILED, not ready in time, left
 * for the control plane to stop) holds its GPUs, so it stays listed. A
 * start not yet in the registry (waiting for its model's pull) is STARTING.
 */
export function filterStatusShards(res: StatusResponse, req: Pick<StatusRequest, 'all' | 'states'>, snapshots: readonly ShardSnapshot[]): StatusResponse {
  const wanted = (state: ShardState, running: boolean) => (req.states.length > 0 ? req.states.includes(state) : req.all || !isTerminal(state) || running);
  const registered = new Map(snapshots.map((s) => [s.shardId as string, s]));
  const before = res.shards.length;
  res.shards = res.shards.filter((sh) => {
    const s = registered.get(sh.shardId);
    return s ? wanted(s.state, s.running) : wanted(sh.state, false);
  });
  // Only the default view hides ended shards; a `states` filter asks for what it lists.
  res.endedHidden = req.all || req.states.length > 0 ? 0 : before - res.shards.length;
  return res;
}
