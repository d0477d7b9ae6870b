import { ShardState } from '../gen/llmgw/v1/agent_pb.js';

/** What the agent, ctl, metrics and the control plane need to know of one shard state. */
export interface ShardStateFacts {
  /** The enum's own name: READY, SLEEPING, ... */
  name: string;
  /** The shard's process is gone or was never started. */
  terminal: boolean;
  /** Past loading and serving traffic (SLEEPING is not: its engine holds no weights on the GPU). */
  serving: boolean;
  /** `ctl drain` may drain it. */
  drainable: boolean;
  /** `ctl drain --cancel` may cancel its drain. */
  cancellable: boolean;
  /** Sort rank where an operator's eye goes first (`ctl top` by state): lower first; 9 for the rest. */
  attention: number;
}

/**
 * The one shard vocabulary (issue 38). Exhaustive by type: a state the
 * proto gains fails `tsc` here until it is classified, and every list
 * elsewhere derives from this table (the metrics' copy once forgot
 * SLEEPING, and a sleeping shard read 0 on every llmgw_shard_state series).
 */
export const SHARD_STATES: Readonly<Record<ShardState, ShardStateFacts>> = {
  [ShardState.UNSPECIFIED]: { name: 'UNSPECIFIED', terminal: false, serving: false, drainable: false, cancellable: false, attention: 9 },
  [ShardState.STARTING]: { name: 'STARTING', terminal: false, serving: false, drainable: false, cancellable: false, attention: 2 },
  [ShardState.READY]: { name: 'READY', terminal: false, serving: true, drainable: true, cancellable: false, attention: 4 },
  [ShardState.UNHEALTHY]: { name: 'UNHEALTHY', terminal: false, serving: true, drainable: true, cancellable: false, attention: 1 },
  [ShardState.DRAINING]: { name: 'DRAINING', terminal: false, serving: true, drainable: true, cancellable: true, attention: 3 },
  [ShardState.SLEEPING]: { name: 'SLEEPING', terminal: false, serving: false, drainable: false, cancellable: false, attention: 9 },
  [ShardState.STOPPING]: { name: 'STOPPING', terminal: false, serving: false, drainable: false, cancellable: false, attention: 9 },
  [ShardState.STOPPED]: { name: 'STOPPED', terminal: true, serving: false, drainable: false, cancellable: false, attention: 9 },
  [ShardState.FAILED]: { name: 'FAILED', terminal: true, serving: false, drainable: false, cancellable: false, attention: 0 },
  [ShardState.EXITED]: { name: 'EXITED', terminal: true, serving: false, drainable: false, cancellable: false, attention: 9 },
};

/** Every state a shard can report (UNSPECIFIED is "not yet supervised", never reported). */
export const REPORTED_SHARD_STATES: readonly ShardState[] = (Object.keys(SHARD_STATES).map(Number) as ShardState[]).filter((s) => s !== ShardState.UNSPECIFIED);

const factsOf = (state: ShardState): ShardStateFacts | undefined => SHARD_STATES[state];

/**
 * States after which a shard's process is gone or was never started: the one
 * definition the agent, ctl and the reference control plane all use.
 */
export const TERMINAL_SHARD_STATES: ReadonlySet<ShardState> = new Set(REPORTED_SHARD_STATES.filter((s) => SHARD_STATES[s].terminal));

/** True once the shard's process is gone or was never started. */
export function isTerminal(state: ShardState): boolean {
  return factsOf(state)?.terminal ?? false;
}

/** Whether an engine in `state` is past loading and still serving traffic (READY, UNHEALTHY or DRAINING). */
export function isServing(state: ShardState): boolean {
  return factsOf(state)?.serving ?? false;
}

/** The state's name, or its number for a value this build does not know. */
export function stateName(state: ShardState): string {
  return factsOf(state)?.name ?? String(state);
}
