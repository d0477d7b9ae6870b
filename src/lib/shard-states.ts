import { ShardState } from '../gen/llmgw/v1/agent_pb.js';

/**
 * States after which a shard's process is gone or was never started: the one
 * definition the agent, ctl and the reference control plane all use.
 */
export const TERMINAL_SHARD_STATES: ReadonlySet<ShardState> = new Set([ShardState.STOPPED, ShardState.FAILED, ShardState.EXITED]);

/** True once the shard's process is gone or was never started. */
export function isTerminal(state: ShardState): boolean {
  return TERMINAL_SHARD_STATES.has(state);
}
