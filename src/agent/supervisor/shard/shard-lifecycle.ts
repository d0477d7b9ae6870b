import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';
import { isServing, isTerminal, stateName } from '../../../lib/shard-states.js';
import type { DeathInfo } from '../launch/death-watch.js';
import { describeDeath } from '../launch/death-watch.js';
import type { HealthVerdict } from '../probes/health-watch.js';

/*
 * One shard's life on one page: the states it may move between, and every
 * judgement the runner asks for (may a readiness wait begin, what a death
 * means, may it drain, what its health says). All pure: the runner applies
 * each verdict through its one transition function.
 */

const S = ShardState;

export { isServing, stateName } from '../../../lib/shard-states.js';

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
  // DRAINING: an adopted engine whose drain outlived the previous agent; SLEEPING: one whose sleep did.
  [S.STARTING, [S.READY, S.DRAINING, S.SLEEPING, S.FAILED, S.STOPPING]],
  // SLEEPING: a SleepShard; the engine lives on without its GPU memory.
  [S.READY, [S.UNHEALTHY, S.DRAINING, S.SLEEPING, S.STOPPING, S.FAILED, S.EXITED]],
  // READY: woken and answering again, or a sleep the engine refused (the
  // shard stays what it was). A death while asleep is a failure: nothing
  // asked the engine to exit.
  [S.SLEEPING, [S.READY, S.STOPPING, S.FAILED]],
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
  if (state === S.STOPPING || state === S.STOPPED) throw failure(detachMessage(shardId, 'stopped'));
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
 * still a failure: the engine never served. Pure, so the runner can judge
 * again after each await and act only if the verdict still holds (a stop may
 * begin while the failure record is written).
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


/** What the runner must do after a health input: set the error when given, then make the transition when given. */
export interface HealthChange {
  error?: string;
  to?: ShardState;
  why: string;
}

/**
 * The health judgement of a serving shard, from two inputs: the health
 * probe's verdicts and faults of its GPUs. It only decides: the runner
 * applies each change through its transition function, so the state still
 * changes in one place.
 */
/** How a fault raised by the periodic known-answer check begins (ShardHealth.markFault, known-answer.ts). */
export const KNOWN_ANSWER_FAULT = 'known answer changed';

export class ShardHealth {
  /** A fault of one of the shard's GPUs ("GPU 3: Xid 79: ..."), '' when they are sound. */
  private gpuFault = '';
  /** The probe's last verdict: a cleared GPU fault returns the shard to READY only if it answers. */
  private probeHealthy = true;
  /** A DRAINING shard keeps it for when its drain is cancelled. */
  private verdict: HealthVerdict = { healthy: true, cause: undefined, why: 'answers /health' };

  get lastVerdict(): HealthVerdict {
    return this.verdict;
  }

  /**
   * The shard began serving. A fault raised while the engine was loading
   * (STARTING cannot become UNHEALTHY): UNHEALTHY at once, so no traffic
   * stays on a failing GPU.
   */
  serving(): HealthChange | undefined {
    return this.gpuFault === '' ? undefined : this.unhealthyForGpu();
  }

  /** Makes the state agree with the verdict; every tick calls it, so only a disagreement changes anything. */
  judge(v: HealthVerdict, state: ShardState): HealthChange | undefined {
    this.verdict = v;
    this.probeHealthy = v.healthy;
    if (!v.healthy && state === S.READY) return { error: v.why, to: S.UNHEALTHY, why: v.why };
    if (!v.healthy && state === S.UNHEALTHY) {
      // Still unhealthy, maybe for another cause now: status shows the latest, without a new report each tick.
      // A GPU fault stays the cause while it lasts.
      return this.gpuFault === '' ? { error: v.why, why: v.why } : undefined;
    }
    // An engine answering again on a faulted GPU stays UNHEALTHY: the GPU, not the engine, is the cause.
    if (v.healthy && state === S.UNHEALTHY && this.gpuFault === '') return { error: '', to: S.READY, why: v.why };
    return undefined;
  }

  /**
   * One of the shard's GPUs has a fault: a READY shard becomes UNHEALTHY with
   * the fault as its error, and stays so while the fault lasts. The engine is
   * not touched: the control plane decides whether to replace it.
   */
  markFault(reason: string, state: ShardState): HealthChange | undefined {
    if (reason === '' || reason === this.gpuFault) return undefined;
    this.gpuFault = reason;
    if (state === S.READY) return this.unhealthyForGpu();
    if (state === S.UNHEALTHY || state === S.DRAINING) return { error: reason, why: reason };
    return undefined;
  }

  /** The shard's GPUs are sound again: back to READY, unless the health probe says otherwise. */
  clearFault(state: ShardState, error: string, only?: string): HealthChange | undefined {
    // `only`: the fault its raiser clears; a GPU fault raised since is not its to clear.
    if (this.gpuFault === '' || (only !== undefined && this.gpuFault !== only)) return undefined;
    const was = this.gpuFault;
    this.gpuFault = '';
    const change: HealthChange = { why: `${was.startsWith(KNOWN_ANSWER_FAULT) ? 'known answer given again' : 'GPU fault cleared'} (${was})` };
    if (error === was) change.error = '';
    if (state === S.UNHEALTHY && this.probeHealthy) change.to = S.READY;
    return change;
  }

  private unhealthyForGpu(): HealthChange {
    return { error: this.gpuFault, to: S.UNHEALTHY, why: this.gpuFault };
  }
}
