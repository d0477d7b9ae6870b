import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { deathOutcome, isLeaving, isServing, stateName } from '../../../lib/shard-states.js';
import type { DeathInfo } from '../../../lib/engine-death.js';
import { describeDeath } from '../../../lib/engine-death.js';

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
 * What a death in `state` means (the vocabulary's `death` fact). STOPPING:
 * stop() reports it, and the reap is its job. Terminal: already reported.
 * A clean exit while STARTING is still a failure: the engine never served.
 */
export function judgeDeath(state: ShardState, info: DeathInfo): DeathVerdict {
  const reap = !isLeaving(state);
  const outcome = deathOutcome(state);
  if (!outcome) return { reap, record: false };
  const clean = info.known && info.code === 0;
  const to = clean ? outcome.clean : outcome.unclean;
  // Serving: "engine exited with code 1"; loading or asleep: "... while starting", "... while sleeping".
  const during = isServing(state) ? '' : ` while ${stateName(state).toLowerCase()}`;
  // A clean exit of a serving engine is no failure, and gets no failure record.
  return { reap, error: `engine ${describeDeath(info)}${during}`, to, record: to === ShardState.FAILED };
}
