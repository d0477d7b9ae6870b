import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';
import { stateName } from './shard-transitions.js';

const S = ShardState;

/** The transition a drain (or its cancel) makes; none for a repeated drain. */
export interface DrainStep {
  to?: ShardState;
  why: string;
}

/**
 * Whether a shard in `state` may be drained (`cancel` false) or have its
 * drain cancelled (`cancel` true), and to which state. Throws a failure
 * naming the state otherwise. A repeated drain is a no-op, so a retried
 * ctl drain does not fail.
 */
export function judgeDrain(shardId: string, state: ShardState, cancel: boolean): DrainStep {
  if (cancel) {
    if (state === S.DRAINING) return { to: S.READY, why: 'drain cancelled' };
    throw failure(`shard ${shardId} is ${stateName(state)}: only a DRAINING shard can have its drain cancelled`);
  }
  if (state === S.READY || state === S.UNHEALTHY) return { to: S.DRAINING, why: 'drain requested' };
  if (state === S.DRAINING) return { why: 'already draining' };
  throw failure(`shard ${shardId} is ${stateName(state)}: only a READY or UNHEALTHY shard can be drained`);
}
