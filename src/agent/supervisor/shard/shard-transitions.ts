import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';

const S = ShardState;

/**
 * Every state change a shard may make. Anything else is a bug in the
 * supervisor, and is refused rather than reported: a control plane that sees
 * READY after STOPPED would route traffic to a dead engine.
 *
 * UNSPECIFIED is "not yet supervised" (a fresh start or an adoption).
 * Terminal states go back to STARTING only through a new start with the same id.
 */
const ALLOWED: ReadonlyMap<ShardState, readonly ShardState[]> = new Map([
  [S.UNSPECIFIED, [S.STARTING]],
  // DRAINING: an adopted engine whose drain outlived the previous agent.
  [S.STARTING, [S.READY, S.DRAINING, S.FAILED, S.STOPPING]],
  [S.READY, [S.UNHEALTHY, S.DRAINING, S.STOPPING, S.FAILED, S.EXITED]],
  // UNHEALTHY is still a running engine: it may recover, be drained or stopped.
  [S.UNHEALTHY, [S.READY, S.DRAINING, S.STOPPING, S.FAILED, S.EXITED]],
  // READY: the drain was cancelled (ctl drain --cancel).
  [S.DRAINING, [S.READY, S.STOPPING, S.FAILED, S.EXITED]],
  // The engine dying while we stop it is the point of stopping, not a failure.
  [S.STOPPING, [S.STOPPED]],
  [S.STOPPED, [S.STARTING]],
  [S.FAILED, [S.STARTING]],
  [S.EXITED, [S.STARTING]],
]);

export function isTransitionAllowed(from: ShardState, to: ShardState): boolean {
  return ALLOWED.get(from)?.includes(to) ?? false;
}

// Defined once, in lib (terminal states are shared with ctl and the control plane).
export { isTerminal } from '../../../lib/shard-states.js';

export function stateName(state: ShardState): string {
  return S[state] ?? String(state);
}
