import { ShardState } from '../gen/llmgw/v1/agent_pb.js';

/** "READY" for ShardState.READY: the enum name as logs and views show it. */
export function shardStateName(state: ShardState): string {
  return ShardState[state] ?? `UNKNOWN_${state}`;
}
