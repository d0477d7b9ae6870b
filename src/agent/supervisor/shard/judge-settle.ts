import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';

const S = ShardState;

/**
 * Whether a readiness wait may begin: 'wait' from STARTING, 'serving' when
 * it is past STARTING and serving (nothing to wait for), 'failed' when it
 * cannot become ready (the runner throws its ShardFailedError). A shard
 * being stopped is a plain failure: it did not fail, it was stopped.
 */
export function judgeSettleStart(shardId: string, state: ShardState): 'wait' | 'serving' | 'failed' {
  if (state === S.STARTING) return 'wait';
  if (state === S.READY || state === S.UNHEALTHY || state === S.DRAINING) return 'serving';
  if (state === S.STOPPING) throw failure(`shard ${shardId} is being stopped`);
  return 'failed';
}

/**
 * After a readiness wait woke: 'starting' when the shard is still STARTING
 * (its outcome decides), 'failed' when it left STARTING for a failure (a
 * death seen meanwhile). Throws a plain failure when it was stopped or its
 * runner detached: those are not the engine's failures.
 */
export function judgeSettleWake(shardId: string, state: ShardState, detached: boolean): 'starting' | 'failed' {
  // stop() detaches too once the group is gone: that is a stop, not the agent going away.
  if (state === S.STOPPING || state === S.STOPPED) throw failure(`shard ${shardId} was stopped while starting`);
  if (detached) throw failure('the supervisor is closed');
  return state === S.STARTING ? 'starting' : 'failed';
}
