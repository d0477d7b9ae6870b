import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../../../lib/errors.js';
import { isTerminal, stateName } from '../../../lib/shard-states.js';
import type { DeathInfo } from '../../../lib/engine-death.js';
import { exitCodeOf } from '../../../lib/engine-death.js';
import { judgeDeath } from './judge-death.js';
import type { HealthVerdict } from '../probes/health-watch.js';

/*
 * One shard's life on one page, as the connection's is in its
 * connection-state.ts: what the shard is (ShardLife: a state and the facts
 * it carries), every input that may change it (ShardChange, each
 * saying which facts it sets), and one pure nextShard() that returns the
 * next life, a one-line refusal for an operator's request in the wrong
 * state, or throws on a bug. The runner (shard-runner.ts) is the hands: it
 * turns each await's outcome into a change and applies it here, so "judge
 * again after each await" holds by construction.
 */

const S = ShardState;

export { isServing, isTrouble, stateName } from '../../../lib/shard-states.js';
export { type DeathVerdict, judgeDeath } from './judge-death.js';

/**
 * Every state change a shard may make. Anything else is a bug in the
 * supervisor, and is refused rather than reported: a control plane that sees
 * READY after STOPPED would route traffic to a dead engine.
 *
 * UNSPECIFIED is "not yet supervised" (a fresh start or an adoption).
 * Terminal states go back to STARTING only through a new start with the same id.
 */
const ALLOWED: Readonly<Record<ShardState, readonly ShardState[]>> = {
  [S.UNSPECIFIED]: [S.STARTING],
  // DRAINING: an adopted engine whose drain outlived the previous agent; SLEEPING: one whose sleep did.
  [S.STARTING]: [S.READY, S.DRAINING, S.SLEEPING, S.FAILED, S.STOPPING],
  // SLEEPING: a SleepShard; the engine lives on without its GPU memory.
  [S.READY]: [S.UNHEALTHY, S.DRAINING, S.SLEEPING, S.STOPPING, S.FAILED, S.EXITED],
  // READY: woken and answering again, or a sleep undone. FAILED: woken
  // without its weights, or a death while asleep (nothing asked it to exit).
  [S.SLEEPING]: [S.READY, S.STOPPING, S.FAILED],
  // UNHEALTHY is still a running engine: it may recover, be drained or stopped.
  [S.UNHEALTHY]: [S.READY, S.DRAINING, S.STOPPING, S.FAILED, S.EXITED],
  // READY: the drain was cancelled (ctl drain --cancel).
  [S.DRAINING]: [S.READY, S.STOPPING, S.FAILED, S.EXITED],
  // The engine dying while we stop it is the point of stopping, not a failure.
  [S.STOPPING]: [S.STOPPED],
  [S.STOPPED]: [S.STARTING],
  [S.FAILED]: [S.STARTING],
  [S.EXITED]: [S.STARTING],
};

export function isTransitionAllowed(from: ShardState, to: ShardState): boolean {
  return ALLOWED[from]?.includes(to) ?? false;
}

/** Where an engine's memory is while its shard sleeps. */
export type SleepMemory =
  /** Still on the GPU: the sleep is asked but not yet done, or an adopted engine was never released. */
  | 'held'
  /** Released by the engine: its GPUs hold little. */
  | 'released'
  /** Taken back by a wake's resume, whose weights may not be back yet; SGLang dies of a second resume. */
  | 'resumed';

export interface SleepFacts {
  /** 1: weights to host RAM; 2: weights dropped (vLLM reloads them). */
  level: 1 | 2;
  /** MiB the shard's GPUs held awake; a wake waits until they hold most of it again (0: unknown, an older agent's file). */
  awakeMib: number;
  memory: SleepMemory;
}

/** What the health inputs last said: the probe's verdict and a fault of one of the shard's GPUs. */
export interface HealthFacts {
  /** "GPU 3: Xid 79: ..." or "known answer changed: ..."; '' when sound. */
  gpuFault: string;
  /** The probe's last verdict: a cleared GPU fault returns the shard to READY only if it answers. */
  probeHealthy: boolean;
  /** Kept for a drain's cancel, which judges the shard again by it. */
  verdict: HealthVerdict;
  /** A peer rank of the shard's gang broke or stalled (issue 40); absent while the gang is whole. */
  gang?: GangFault;
}

/** What the gang watch saw of a peer rank (gang-watch.ts): ShardStatus.gang_break. */
export interface GangFault {
  rank: number;
  nodeId: string;
  shardId: string;
  /** "rank 0 on node-a unreachable since 12:00:01Z (...)". */
  reason: string;
  sinceMs: number;
  /** Alive but making no progress: reported, never a reason to fence. */
  stalled: boolean;
  /** On a rank that ended: the peer named went first (GangBreak.first_to_go). */
  firstToGo?: boolean;
}

/** The shard's error for a gang fault: "gang broken: rank 0 on node-a ...". */
export function gangError(f: GangFault): string {
  return `gang ${f.stalled ? 'stalled' : 'broken'}: ${f.reason}`;
}

/** The fault that holds a shard UNHEALTHY whatever its probe says: its GPUs', else its gang's; '' when none. */
function heldFault(h: HealthFacts): string {
  return h.gpuFault !== '' ? h.gpuFault : h.gang ? gangError(h.gang) : '';
}

/** One shard as it is: its state and the facts that state carries. */
export interface ShardLife {
  state: ShardState;
  /** Why the shard failed, exited, is unhealthy or was refused a sleep or wake; '' otherwise. */
  error: string;
  /** The engine's leader is gone (its group may not be). */
  dead: boolean;
  /** When the engine's leader was seen gone (this node's clock), as the gang answer tells peers. */
  endedAtMs?: number;
  /** 128+n when killed by signal n, as a shell reports it; null while unknown. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The engine's last log lines, read when it failed or exited. */
  lastOutput: readonly string[];
  /** Drained, here or (from the state file) before an agent restart, and not cancelled. */
  drain: boolean;
  /** Asleep, here or (from the state file) before an agent restart; absent awake. */
  sleep?: SleepFacts;
  /** The engine was seen asleep while READY: someone else called its keyless /sleep (security review 3, S6). */
  sleptUnasked: boolean;
  /** Who held the port while the shard was STARTING, until it was gone. */
  squatter?: string;
  /** The engine's greedy answer to the known-answer prompt, from its first READY (known-answer.ts). */
  knownAnswer?: string;
  /** Its first token as the engine names it, when it gave one (known-answer.ts). */
  knownAnswerToken?: string;
  health: HealthFacts;
}

/** Every input that may change a shard, each saying which facts it sets. */
export type ShardChange =
  /** Supervised from here: a launch, or an adoption. */
  | { kind: 'begin'; why: string }
  /** A process not the engine's holds the port while it starts (undefined: it is gone). */
  | { kind: 'squatted'; squatter: string | undefined }
  /** An adopted engine says it sleeps though its state file recorded it awake (adopted-sleep.ts): asleep from here, while the adoption settles only (after it, sleeps are the agent's own and the health watch judges the rest). */
  | { kind: 'found-asleep'; level: 1 | 2; why: string }
  /** An adopted engine says it is awake though its state file recorded it asleep: awake from here. */
  | { kind: 'found-awake'; why: string }
  /** The engine answers as at a start: READY, or what a drain or sleep from before the restart says. */
  | { kind: 'answered'; why: string }
  /** The health watch began: a GPU fault raised while the engine loaded counts now. */
  | { kind: 'watched' }
  /** It did not become ready in time. */
  | { kind: 'not-ready'; error: string; lastOutput: readonly string[] }
  /** The engine's leader is gone (seen at `atMs`); its exit status when known. */
  | { kind: 'exited'; atMs?: number; exit?: { code: number | null; signal: NodeJS.Signals | null } }
  /** What its death means (judgeDeath), once its leftovers are reaped: `details` follow its error, then a peer that went first. */
  | { kind: 'died'; info: DeathInfo; details: readonly string[]; lastOutput: readonly string[]; firstToGo?: GangFault }
  /** The health probe's verdict. */
  | { kind: 'probe'; verdict: HealthVerdict }
  /** The known answer of an engine awake again after a sleep the agent did not ask for: `lost` when it lost its weights. */
  | { kind: 'answer-after-unasked-sleep'; lost?: string; verdict: HealthVerdict }
  | { kind: 'gpu-fault'; reason: string }
  /** The fault is gone; `only`: the fault its raiser clears, not one raised since. */
  | { kind: 'gpu-sound'; only?: string }
  /** A peer rank broke or stalled (gang-watch.ts); sets health.gang. */
  | { kind: 'gang-fault'; fault: GangFault }
  /** Every peer rank answers again; clears health.gang. */
  | { kind: 'gang-whole' }
  | { kind: 'known-answer'; text: string; token?: string }
  | { kind: 'drain' }
  | { kind: 'cancel-drain' }
  /** A sleep asked, its checks passed: SLEEPING is reported before the engine is asked. */
  | { kind: 'sleep'; level: 1 | 2; awakeMib: number; why: string }
  | { kind: 'released' }
  | { kind: 'resumed' }
  /** A sleep undone: READY, or FAILED when the engine woke without its weights. */
  | { kind: 'sleep-failed'; error: string; lostWeights: boolean }
  /** May a wake begin. */
  | { kind: 'wake' }
  | { kind: 'woken'; why: string }
  /** A wake that failed before its proof: still asleep, with the reason. */
  | { kind: 'wake-failed'; error: string }
  | { kind: 'woke-without-weights'; error: string; lastOutput: readonly string[] }
  | { kind: 'stop'; why: string }
  | { kind: 'stopped'; why: string };

export type ShardChangeKind = ShardChange['kind'];

/** The next life and why, or an operator's request refused in one line (nothing changed). */
export type ShardNext = { life: ShardLife; why: string } | { refused: string };

/** How a fault raised by the periodic known-answer check begins. */
export const KNOWN_ANSWER_FAULT = 'known answer changed';

const WELL: HealthVerdict = { healthy: true, cause: undefined, why: 'answers /health' };

/** A shard not yet supervised, with what its state file says of it. */
export function newShardLife(from: { state?: ShardState; drain?: boolean; sleepLevel?: number; awakeMib?: number; knownAnswer?: string; knownAnswerToken?: string } = {}): ShardLife {
  const level = from.sleepLevel === 1 || from.sleepLevel === 2 ? from.sleepLevel : undefined;
  return {
    state: from.state ?? S.UNSPECIFIED,
    error: '',
    dead: false,
    exitCode: null,
    signal: null,
    lastOutput: [],
    drain: from.drain ?? false,
    // Recorded asleep: released, as far as anyone knows; a wake looks (neverReleased).
    ...(level ? { sleep: { level, awakeMib: from.awakeMib ?? 0, memory: 'released' as const } } : {}),
    sleptUnasked: false,
    ...(from.knownAnswer !== undefined ? { knownAnswer: from.knownAnswer, knownAnswerToken: from.knownAnswerToken } : {}),
    health: { gpuFault: '', probeHealthy: true, verdict: WELL },
  };
}

/**
 * The next life of `life` after `change`. Returns a refusal for a request
 * the state does not allow (a drain of a STARTING shard), the same life
 * when the change means nothing now (a death already reported), and throws
 * when it would make a transition ALLOWED does not list: that is a bug.
 */
export function nextShard(life: ShardLife, change: ShardChange, shardId = ''): ShardNext {
  let next: ShardNext;
  try {
    next = decide(life, change);
    if ('refused' in next || next.life.state === life.state || isTransitionAllowed(life.state, next.life.state)) return next;
  } catch (err) {
    throw new Error(`shard ${shardId}: ${errorMessage(err)}`);
  }
  throw new Error(`shard ${shardId}: transition ${stateName(life.state)} → ${stateName(next.life.state)} is not allowed (${change.kind}: ${next.why})`);
}

function decide(l: ShardLife, c: ShardChange): ShardNext {
  const same = (why: string): ShardNext => ({ life: l, why });
  // A transition, checked here even to the same state (READY → READY is a bug too); nextShard checks the rest.
  const to = (state: ShardState, why: string, facts: Partial<ShardLife> = {}): ShardNext => {
    if (!isTransitionAllowed(l.state, state)) throw new Error(`transition ${stateName(l.state)} → ${stateName(state)} is not allowed (${c.kind}: ${why})`);
    return { life: { ...l, ...facts, state }, why };
  };
  const set = (why: string, facts: Partial<ShardLife>): ShardNext => ({ life: { ...l, ...facts }, why });
  switch (c.kind) {
    case 'begin':
      return to(S.STARTING, c.why);
    case 'squatted':
      // Dead: the death's reason names the squatter itself.
      if (l.state !== S.STARTING || l.dead) return same('not starting');
      return set(c.squatter ?? 'port free', { squatter: c.squatter, error: c.squatter ?? '' });
    case 'found-asleep':
      if (l.state !== S.STARTING) return same('no longer starting');
      return set(c.why, { sleep: { level: c.level, awakeMib: l.sleep?.awakeMib ?? 0, memory: 'released' } });
    case 'found-awake':
      if (l.state !== S.STARTING || !l.sleep) return same('not starting asleep');
      return set(c.why, { sleep: undefined });
    case 'answered':
      // The runner asks only of a shard it saw STARTING, without an await between.
      if (l.state !== S.STARTING) throw new Error(`an answer while ${stateName(l.state)} is not a readiness outcome`);
      // A drain that survived the agent: READY would send traffic back to an engine an operator is emptying.
      if (l.drain) return to(S.DRAINING, `${c.why}; drained before the agent restarted`);
      // A sleep likewise (issue 30): READY would route traffic to an engine without its weights.
      if (l.sleep) return to(S.SLEEPING, `${c.why}; asleep (level ${l.sleep.level}) before the agent restarted`);
      return to(S.READY, c.why);
    case 'watched':
      // STARTING cannot become UNHEALTHY: a fault raised while loading counts once it serves.
      if (heldFault(l.health) === '') return same('GPUs and gang sound');
      return unhealthyForGpu(l);
    case 'not-ready':
      if (l.state !== S.STARTING) return same('no longer starting');
      return to(S.FAILED, c.error, { error: c.error, lastOutput: c.lastOutput });
    case 'exited':
      if (l.dead) return same('already gone');
      return set('engine gone', { dead: true, ...(c.atMs !== undefined ? { endedAtMs: c.atMs } : {}), ...(c.exit ? { exitCode: exitCodeOf(c.exit.code, c.exit.signal), signal: c.exit.signal } : {}) });
    case 'died': {
      const verdict = judgeDeath(l.state, c.info);
      if (verdict.to === undefined || verdict.error === undefined) return same('nothing to report');
      const first = c.firstToGo;
      const error = [verdict.error, ...c.details].join(': ') + (first ? `; ${gangError(first)}` : '');
      return to(verdict.to, error, { error, lastOutput: c.lastOutput, ...(first ? { health: { ...l.health, gang: first } } : {}) });
    }
    case 'probe':
      if (c.verdict.cause === 'asleep' && l.state === S.READY) l = { ...l, sleptUnasked: true };
      // Woken by whoever put it to sleep, perhaps without its weights: READY only with its known answer (the runner asks).
      if (c.verdict.healthy && l.sleptUnasked && l.state === S.UNHEALTHY) return { life: l, why: 'awake again: its known answer decides' };
      return judgeProbe(l, c.verdict);
    case 'answer-after-unasked-sleep':
      if (l.state !== S.UNHEALTHY) return same('no longer unhealthy');
      if (c.lost !== undefined) return to(S.FAILED, c.lost, { error: c.lost });
      return judgeProbe({ ...l, sleptUnasked: false }, c.verdict);
    case 'gpu-fault': {
      if (c.reason === '' || c.reason === l.health.gpuFault) return same('fault already known');
      const faulted = { ...l, health: { ...l.health, gpuFault: c.reason } };
      if (l.state === S.READY) return unhealthyForGpu(faulted);
      if (l.state === S.UNHEALTHY || l.state === S.DRAINING) return { life: { ...faulted, error: c.reason }, why: c.reason };
      return { life: faulted, why: c.reason };
    }
    case 'gpu-sound': {
      const was = l.health.gpuFault;
      if (was === '' || (c.only !== undefined && was !== c.only)) return same('no such fault');
      const why = `${was.startsWith(KNOWN_ANSWER_FAULT) ? 'known answer given again' : 'GPU fault cleared'} (${was})`;
      const gang = l.health.gang;
      const sound = { ...l, health: { ...l.health, gpuFault: '' }, ...(l.error === was ? { error: gang ? gangError(gang) : '' } : {}) };
      if (l.state === S.UNHEALTHY && l.health.probeHealthy && !gang) return { life: { ...sound, state: S.READY }, why };
      return { life: sound, why };
    }
    case 'gang-fault': {
      const was = l.health.gang;
      if (was && was.reason === c.fault.reason && was.stalled === c.fault.stalled) return same('gang fault already known');
      const error = gangError(c.fault);
      const faulted = { ...l, health: { ...l.health, gang: c.fault } };
      // A rank still loading whose gang broke never serves: its peers are what it waits for.
      if (l.state === S.STARTING) return c.fault.stalled ? { life: faulted, why: error } : to(S.FAILED, error, { ...faulted, error });
      if (l.state === S.READY) return to(S.UNHEALTHY, error, { ...faulted, error });
      // UNHEALTHY, DRAINING, SLEEPING: the state stays, the report names the gang (a control plane fences on it).
      if (l.state === S.UNHEALTHY || l.state === S.DRAINING || l.state === S.SLEEPING) return { life: { ...faulted, error: l.health.gpuFault || error }, why: error };
      return { life: faulted, why: error };
    }
    case 'gang-whole': {
      const was = l.health.gang;
      if (!was) return same('gang already whole');
      const why = `gang whole again (was: ${gangError(was)})`;
      const whole = { ...l, health: { ...l.health, gang: undefined }, ...(l.error === gangError(was) ? { error: '' } : {}) };
      if (l.state === S.UNHEALTHY && l.health.probeHealthy && l.health.gpuFault === '') return to(S.READY, why, whole);
      return { life: whole, why };
    }
    case 'known-answer':
      // Only an engine still READY answered with its weights; one asleep or stopping meanwhile proves nothing.
      if (l.state !== S.READY) return { refused: `shard is ${stateName(l.state)}: only a READY engine's answer is recorded` };
      return set('known answer recorded', { knownAnswer: c.text, knownAnswerToken: c.token });
    case 'drain':
      if (l.state === S.READY || l.state === S.UNHEALTHY) return to(S.DRAINING, 'drain requested', { drain: true });
      if (l.state === S.DRAINING) return same('already draining');
      return { refused: `is ${stateName(l.state)}: only a READY or UNHEALTHY shard can be drained` };
    case 'cancel-drain':
      if (l.state !== S.DRAINING) return { refused: `is ${stateName(l.state)}: only a DRAINING shard can have its drain cancelled` };
      return to(S.READY, 'drain cancelled', { drain: false, error: '' });
    case 'sleep':
      if (l.state !== S.READY) return { refused: `is ${stateName(l.state)}; only a READY shard can sleep` };
      return to(S.SLEEPING, c.why, { sleep: { level: c.level, awakeMib: c.awakeMib, memory: 'held' } });
    case 'released':
      if (!l.sleep || l.state !== S.SLEEPING) return same('not asleep');
      return set('GPU memory released', { error: '', sleep: { ...l.sleep, memory: 'released' } });
    case 'resumed':
      if (!l.sleep) return same('not asleep');
      return set('GPU memory taken back', { sleep: { ...l.sleep, memory: 'resumed' } });
    case 'sleep-failed': {
      const awake = { ...l, sleep: undefined };
      if (l.state !== S.SLEEPING) return { life: awake, why: c.error };
      return { life: { ...awake, error: c.error, state: c.lostWeights ? S.FAILED : S.READY }, why: c.error };
    }
    case 'wake':
      if (l.state !== S.SLEEPING) return { refused: `is ${stateName(l.state)}; only a SLEEPING shard can be woken` };
      return same('wake asked');
    case 'woken':
      if (l.state !== S.SLEEPING) return { refused: `became ${stateName(l.state)} while waking` };
      return to(S.READY, c.why, { error: '', sleep: undefined });
    case 'wake-failed':
      if (l.state !== S.SLEEPING) return same('not asleep');
      return set(c.error, { error: c.error });
    case 'woke-without-weights':
      if (l.state !== S.SLEEPING) return { refused: `became ${stateName(l.state)} while waking` };
      return to(S.FAILED, c.error, { error: c.error, lastOutput: c.lastOutput });
    case 'stop':
      if (l.state === S.STOPPING || isTerminal(l.state)) return same('already stopping or ended');
      return to(S.STOPPING, c.why);
    case 'stopped':
      if (l.state !== S.STOPPING) return same('not stopping');
      return to(S.STOPPED, c.why, { dead: true });
  }
}

/** The health judgement of a serving shard from the probe: only a disagreement with its state changes anything. */
function judgeProbe(l: ShardLife, v: HealthVerdict): ShardNext {
  const life = { ...l, health: { ...l.health, verdict: v, probeHealthy: v.healthy } };
  const gpuFault = heldFault(l.health);
  if (!v.healthy && l.state === S.READY) return { life: { ...life, state: S.UNHEALTHY, error: v.why }, why: v.why };
  // Still unhealthy, maybe for another cause now; a GPU fault stays the cause while it lasts.
  if (!v.healthy && l.state === S.UNHEALTHY) return { life: gpuFault === '' ? { ...life, error: v.why } : life, why: v.why };
  // An engine answering again on a faulted GPU stays UNHEALTHY: the GPU, not the engine, is the cause.
  if (v.healthy && l.state === S.UNHEALTHY && gpuFault === '') return { life: { ...life, state: S.READY, error: '' }, why: v.why };
  return { life, why: v.why };
}

function unhealthyForGpu(l: ShardLife): ShardNext {
  const why = heldFault(l.health);
  if (l.state === S.READY) return { life: { ...l, state: S.UNHEALTHY, error: why }, why };
  // A drain or sleep from before the restart stays what it is; a DRAINING shard carries the fault as its error.
  return { life: l.state === S.DRAINING || l.state === S.UNHEALTHY ? { ...l, error: why } : l, why };
}

/**
 * The state Register reports for a shard: an adopted shard still settling
 * whose drain or sleep outlived the previous agent is reported so at once
 * (a control plane that saw STARTING would route traffic back to it, or arm
 * a startup timer for an engine that sleeps).
 */
export function registerState(s: { state: ShardState; drainRequested?: boolean; sleepLevel?: number }): ShardState {
  if (s.state !== S.STARTING) return s.state;
  if (s.drainRequested) return S.DRAINING;
  return s.sleepLevel ? S.SLEEPING : s.state;
}
