import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { isServing, isTerminal } from '../../../lib/shard-states.js';
import type { DeathInfo } from '../../../lib/engine-death.js';
import { describeDeath } from '../../../lib/engine-death.js';

const S = ShardState;

/** What the death of a shard's engine leader means, for the runner to carry out. */
export interface DeathVerdict {
  /** End what survives the leader first (the rest of its group or unit). */
  reap: boolean;
  /** The shard's error; undefined when the death changes nothing. */
  error?: string;
  /** The state to report; undefined when the death changes nothing. */
  to?: ShardState;
  /** Write a failure record (a clean exit of a serving engine is no failure). */
  record: boolean;
}

/**
 * What a death in `state` means. STOPPING: stop() reports it, and the reap
 * is its job. Terminal: already reported. A clean exit while STARTING is
 * still a failure: the engine never served.
 */
export function judgeDeath(state: ShardState, info: DeathInfo): DeathVerdict {
  const reap = state !== S.STOPPING && !isTerminal(state);
  const how = describeDeath(info);
  if (state === S.STARTING) return { reap, error: `engine ${how} while starting`, to: S.FAILED, record: true };
  if (state === S.SLEEPING) return { reap, error: `engine ${how} while sleeping`, to: S.FAILED, record: true };
  if (isServing(state)) {
    const clean = info.known && info.code === 0;
    return { reap, error: `engine ${how}`, to: clean ? S.EXITED : S.FAILED, record: !clean };
  }
  return { reap, record: false };
}
