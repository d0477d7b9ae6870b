import { ShardState } from '../gen/llmgw/v1/agent_pb.js';

const S = ShardState;

/** What an engine's death in a state makes of its shard, by how it died. */
export interface DeathOutcome {
  /** After a clean exit (code 0). */
  clean: ShardState;
  /** After any other death: a signal, a non-zero code, or one not known. */
  unclean: ShardState;
}

/** What the agent, ctl, metrics and the control plane need to know of one shard state. */
export interface ShardStateFacts {
  /** The enum's own name: READY, SLEEPING, ... */
  name: string;
  /** A shard reports it (UNSPECIFIED is "not yet supervised", never reported). */
  reported: boolean;
  /** The shard's process is gone or was never started. */
  terminal: boolean;
  /** Stopping or ended: its engine is on its way out or gone, and nothing it began will finish. */
  leaving: boolean;
  /** A stop was asked of it (ctl stop, StopShard): an end that is nobody's failure. */
  stopAsked: boolean;
  /** Ended without a stop asked: the engine failed or exited on its own (engine exits, dev up's failures). */
  unplannedEnd: boolean;
  /** Something is wrong an operator should hear of: entering it is logged as a warning. */
  trouble: boolean;
  /** Past loading and serving traffic (SLEEPING is not: its engine holds no weights on the GPU). */
  serving: boolean;
  /** No weights on its GPUs to serve from, yet (loading) or any more (asleep): READY after it is a warm-up. */
  cold: boolean;
  /** What its engine's death makes of it; undefined: nothing (not yet supervised, stop() reports it, or already ended). */
  death: DeathOutcome | undefined;
  /** The control plane gives a shard it adopts in this state a startup timeout, as if it were still loading. */
  timedOnAdoption: boolean;
  /** `ctl drain` may drain it. */
  drainable: boolean;
  /** `ctl drain --cancel` may cancel its drain. */
  cancellable: boolean;
  /** Sort rank where an operator's eye goes first (`ctl top` by state): lower first; 9 for the rest. */
  attention: number;
}

/** A death while loading is a failure whatever its code: the engine never served. Asleep: nothing asked it to exit. */
const FAILS: DeathOutcome = { clean: S.FAILED, unclean: S.FAILED };
/** A serving engine that exits cleanly has ended, not failed (a clean exit is no failure record). */
const ENDS: DeathOutcome = { clean: S.EXITED, unclean: S.FAILED };

const NONE = {
  reported: true, terminal: false, leaving: false, stopAsked: false, unplannedEnd: false, trouble: false,
  serving: false, cold: false, death: undefined, timedOnAdoption: true, drainable: false, cancellable: false, attention: 9,
} as const satisfies Omit<ShardStateFacts, 'name'>;
const ENDED = { ...NONE, terminal: true, leaving: true } as const;

/**
 * The one shard vocabulary (issue 38). Exhaustive by type: a state the
 * proto gains fails `tsc` here until it is classified, and every list
 * elsewhere derives from this table (the metrics' copy once forgot
 * SLEEPING, and a sleeping shard read 0 on every llmgw_shard_state series).
 */
export const SHARD_STATES: Readonly<Record<ShardState, ShardStateFacts>> = {
  [S.UNSPECIFIED]: { ...NONE, name: 'UNSPECIFIED', reported: false },
  [S.STARTING]: { ...NONE, name: 'STARTING', cold: true, death: FAILS, attention: 2 },
  [S.READY]: { ...NONE, name: 'READY', serving: true, death: ENDS, timedOnAdoption: false, drainable: true, attention: 4 },
  [S.UNHEALTHY]: { ...NONE, name: 'UNHEALTHY', trouble: true, serving: true, death: ENDS, drainable: true, attention: 1 },
  [S.DRAINING]: { ...NONE, name: 'DRAINING', serving: true, death: ENDS, drainable: true, cancellable: true, attention: 3 },
  // Asleep on purpose, not loading: no startup timeout applies.
  [S.SLEEPING]: { ...NONE, name: 'SLEEPING', cold: true, death: FAILS, timedOnAdoption: false },
  [S.STOPPING]: { ...NONE, name: 'STOPPING', leaving: true, stopAsked: true },
  [S.STOPPED]: { ...ENDED, name: 'STOPPED', stopAsked: true },
  [S.FAILED]: { ...ENDED, name: 'FAILED', unplannedEnd: true, trouble: true, attention: 0 },
  [S.EXITED]: { ...ENDED, name: 'EXITED', unplannedEnd: true },
};

const ALL_STATES = Object.keys(SHARD_STATES).map(Number) as ShardState[];

/** Every state a shard can report (UNSPECIFIED is "not yet supervised", never reported). */
export const REPORTED_SHARD_STATES: readonly ShardState[] = ALL_STATES.filter((s) => SHARD_STATES[s].reported);

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

/** A state a shard reports; false for UNSPECIFIED (an older agent's running shard listed without one) and unknown values. */
export function isReported(state: ShardState): boolean {
  return factsOf(state)?.reported ?? false;
}

/** Stopping or ended (STOPPING, STOPPED, FAILED, EXITED): nothing the shard began will finish, and its gang lost it. */
export function isLeaving(state: ShardState): boolean {
  return factsOf(state)?.leaving ?? false;
}

/** A rank in `state` is one its gang counts on: supervised, and neither stopping nor ended. */
export function isGangMember(state: ShardState): boolean {
  return isReported(state) && !isLeaving(state);
}

/** A stop was asked of it (STOPPING, STOPPED): not the engine's failure. */
export function isStopAsked(state: ShardState): boolean {
  return factsOf(state)?.stopAsked ?? false;
}

/** Ended without a stop asked (FAILED, EXITED): what counts as an engine exit. */
export function isUnplannedEnd(state: ShardState): boolean {
  return factsOf(state)?.unplannedEnd ?? false;
}

/** Something is wrong an operator should hear of (UNHEALTHY, FAILED). */
export function isTrouble(state: ShardState): boolean {
  return factsOf(state)?.trouble ?? false;
}

/** The control plane gives a shard adopted in `state` a startup timeout (all but READY and SLEEPING). */
export function isTimedOnAdoption(state: ShardState): boolean {
  return factsOf(state)?.timedOnAdoption ?? true;
}

/** What an engine's death in `state` makes of its shard; undefined when it changes nothing. */
export function deathOutcome(state: ShardState): DeathOutcome | undefined {
  return factsOf(state)?.death;
}

/** A change that ends a launch: the engine loaded and answered (what a start's compile cache is known by). */
export function isLaunchDone(from: ShardState, to: ShardState): boolean {
  return from === S.STARTING && to === S.READY;
}

/** A change that ends a warm-up, a launch's or a wake's: READY from a cold state (what warmth-ledger times). */
export function isWarmedUp(from: ShardState, to: ShardState): boolean {
  return to === S.READY && (factsOf(from)?.cold ?? false);
}

/** The state's name, or its number for a value this build does not know. */
export function stateName(state: ShardState): string {
  return factsOf(state)?.name ?? String(state);
}

const BY_NAME: ReadonlyMap<string, ShardState> = new Map(ALL_STATES.map((s) => [SHARD_STATES[s].name, s]));

/** The state a name (a peer agent's JSON answer) stands for; undefined for a name this build does not know. */
export function stateNamed(name: string): ShardState | undefined {
  return BY_NAME.get(name);
}
