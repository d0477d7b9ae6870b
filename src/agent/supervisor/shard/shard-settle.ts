import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';
import { isServing, isStopAsked } from '../../../lib/shard-states.js';

/*
 * The judgements of a readiness wait (ShardRunner.settle): may it begin, and
 * what does its waking mean. Pure, beside the machine they feed.
 */

const S = ShardState;

/** A profile without startup_timeout gets this long to load (large models take minutes). */
export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

export interface SettleOptions {
  /** How long an HTTP rank may take to serve its model; default DEFAULT_STARTUP_TIMEOUT_MS (10 min). */
  timeoutMs?: number;
  /** How long a worker rank must stay alive; default config.workerSettleMs. */
  settleMs?: number;
  signal?: AbortSignal;
}

/**
 * Whether a readiness wait may begin: 'wait' from STARTING, 'serving' when
 * it is past STARTING and serving (nothing to wait for), 'failed' when it
 * cannot become ready (the runner throws its ShardFailedError). A shard
 * being stopped is a plain failure: it did not fail, it was stopped.
 */
export function judgeSettleStart(shardId: string, state: ShardState): 'wait' | 'serving' | 'failed' {
  if (state === S.STARTING) return 'wait';
  if (isServing(state)) return 'serving';
  if (state === S.STOPPING) throw failure(`shard ${shardId} is being stopped`);
  return 'failed';
}

/**
 * After a readiness wait woke: 'starting' when the shard is still STARTING
 * (its outcome decides), 'failed' when it left STARTING for a failure (a
 * death seen meanwhile). Throws a plain failure when it was stopped or its
 * runner detached: those are not the engine's failures.
 */
export function judgeSettleWake(shardId: string, state: ShardState, detached: DetachReason | undefined): 'starting' | 'failed' {
  // stop() detaches too once the group is gone: that is a stop, not the agent going away.
  if (isStopAsked(state)) throw failure(detachMessage(shardId, 'stopped'));
  if (detached) throw failure(detachMessage(shardId, detached));
  return state === S.STARTING ? 'starting' : 'failed';
}

/**
 * Why a runner stopped watching its engine (ShardRunner.detach), none of
 * which touches a process: the agent is closing (engines outlive it), the
 * runner was replaced by a relaunch under the same id, or the shard was
 * stopped.
 */
export type DetachReason = 'agent-closing' | 'replaced' | 'stopped';

/** What a wait cut short by detach(`why`) tells its caller. */
export function detachMessage(shardId: string, why: DetachReason): string {
  if (why === 'stopped') return `shard ${shardId} was stopped while starting`;
  if (why === 'replaced') return `shard ${shardId} was started again; this run is no longer watched`;
  return 'the supervisor is closed';
}
