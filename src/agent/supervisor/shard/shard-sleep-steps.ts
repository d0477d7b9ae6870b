import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { type Deadline, deadlineSignal } from '../../../lib/deadline.js';
import { errorMessage, failure } from '../../../lib/errors.js';
import type { EngineSleepApi, WakeCalls } from '../../../lib/engine-sleep-api.js';
import { type Answered, checkKnownAnswer, KNOWN_PROMPT, NOT_OBTAINED } from '../probes/known-answer.js';
import { recordedAnswer, type ShardAnswers } from './shard-answers.js';
import { readLastOutput } from './shard-failure.js';
import type { ShardHands } from './shard-hands.js';
import type { ShardChange } from './shard-machine.js';
import { checkHostRoom } from './host-room.js';
import type { HostRamClaim } from './host-ram-ledger.js';
import { ASLEEP_SHARE, AWAKE_SHARE, awaitFirstReading, awaitGpuMemory, callEngine, DEFAULT_SLEEP_TIMEOUT_MS, hostCopyAdvice, judgeSleep, type SleepProbes } from './shard-sleep.js';
import { judgeSurvival } from './sleep-survival.js';
import { engineKindOf } from '../../engines/engine-catalog.js';

/*
 * The steps of a sleep and a wake (issue 30): the engine's calls, the GPU
 * readings that prove them, the state file and the known answer. Each
 * outcome is a change the runner's machine judges; nothing here decides a
 * state.
 */

/** What a sleep or wake needs of its shard's runner, and its known answers. */
export type SleepHands = Pick<
  ShardHands,
  'shardId' | 'spec' | 'fields' | 'logPath' | 'baseUrl' | 'adminKey' | 'signal' | 'log' | 'stateFile' | 'sleepApi' | 'facts' | 'checksAnswers' | 'life' | 'apply' | 'told' | 'target' | 'inFlight' | 'readiness'
> & { answers: ShardAnswers };

const KNOWN_PROMPT_LABEL = JSON.stringify(KNOWN_PROMPT);

/** Applies a change that must not be refused here; a refusal is the shard having moved on, thrown as one line. */
function applyOrThrow(h: SleepHands, change: ShardChange): void {
  const next = h.apply(change);
  if ('refused' in next) throw failure(`shard ${h.shardId} ${next.refused}`);
}

/** A sleep whose checks passed: the engine's API, the level, and what its GPUs held awake. */
export interface PreparedSleep {
  api: EngineSleepApi;
  level: 1 | 2;
  before: number;
  /** Host RAM claimed for its copy (HostRamLedger): released by the runner once the sleep has finished or failed. */
  claim?: HostRamClaim;
}

/**
 * Whether the shard may sleep at `level` (judgeSleep), and what its GPUs
 * hold now; throws a one-line refusal before anything is touched. The
 * runner then reports SLEEPING, so the control plane routes elsewhere
 * before the engine aborts what it holds (vLLM's mode=abort), and calls
 * releaseShard.
 */
export async function prepareSleep(h: SleepHands, level: number, probes: SleepProbes): Promise<PreparedSleep> {
  const api = judgeSleep(h.shardId, h.life().state, h.spec, level, h.sleepApi);
  const lvl = level as 1 | 2;
  // Sleeps the engine cannot survive (its version, a draft, a loader without reload), by what it said at READY.
  judgeSurvival(h.spec, lvl, engineKindOf(h.spec.profile?.engine ?? '')?.sleepSurvivalReadsVersion ? await h.facts.read(h.signal) : h.facts.version);
  // From a reading newer than the request: one just after READY may predate the engine's memory.
  const before = await awaitFirstReading(probes, h.spec.gpuIndices, h.signal);
  const instead = hostCopyAdvice(api, lvl, h.facts.hostCopyMib);
  // Claimed before MemAvailable is read, so that concurrent sleeps are judged together (host-ram-ledger.ts).
  const claim = instead !== undefined ? probes.hostRam?.claim(h.shardId, before) : undefined;
  try {
    if (instead !== undefined) await checkHostRoom(lvl, before, h.facts.pid, instead, { meminfo: probes.meminfoPath, ...probes.hostRoomPaths }, claim?.ahead);
    if (api.mustBeIdle) {
      const held = await h.inFlight();
      if (held !== 0) throw failure(`sleep refused: ${h.spec.profile?.engine} must be idle to release its memory and holds ${held ?? 'an unknown number of'} request(s); drain it first`);
    }
    // What its wake is checked against, from the engine awake: none, and a woken engine on garbage weights would pass as READY.
    if (h.checksAnswers && (await h.answers.of(h.signal)) === undefined) {
      throw failure(`sleep refused: shard ${h.shardId} gave no answer to ${KNOWN_PROMPT_LABEL} to check its wake against (see the agent's log); a shard whose wake cannot be checked is not put to sleep`);
    }
  } catch (err) {
    claim?.release();
    throw err;
  }
  return { api, level: lvl, before, ...(claim ? { claim } : {}) };
}

/**
 * The shard reported SLEEPING: the engine is asked to release its memory,
 * and the shard's GPU readings must fall to ASLEEP_SHARE of what they held.
 * A sleep that fails is undone (the engine woken), and the shard is READY
 * again with the reason as its error, or FAILED when it woke without its weights.
 */
export async function releaseShard(h: SleepHands, { api, level, before }: PreparedSleep, probes: SleepProbes): Promise<void> {
  const gpus = h.spec.gpuIndices;
  let deadline: Deadline | undefined;
  try {
    deadline = deadlineSignal(probes.timeoutMs ?? DEFAULT_SLEEP_TIMEOUT_MS, h.signal);
    const signal = deadline.signal;
    // Recorded before the engine is asked: an agent killed meanwhile adopts it SLEEPING (a wake of an awake vLLM is harmless; of an awake SGLang, not).
    await h.stateFile.recordSleep(level, before);
    // SGLang: new requests are held in its tokenizer from here, any that raced the idle check aborted.
    if (api.hold) await callEngine(h.baseUrl, api.hold.pause, h.adminKey, signal);
    await callEngine(h.baseUrl, api.levels[level].sleep, h.adminKey, signal);
    h.apply({ kind: 'released' });
    // SGLang keeps the pinned copy from here for the engine's life: its next sleeps need no room for it.
    if (api.hostCopyKept && api.levels[level].hostCopy) await h.facts.hostCopyPinned(before);
    const after = await awaitGpuMemory(probes, gpus, (mib) => mib <= before * ASLEEP_SHARE, 'the engine did not free its GPU memory', signal);
    h.log.info({ ...h.fields, sleepLevel: level, beforeMib: before, afterMib: after }, 'shard asleep: GPU memory released');
    h.told();
  } catch (err) {
    const why = `sleep failed: ${errorMessage(err)}`;
    const released = h.life().sleep?.memory === 'released';
    // The engine may be half asleep: woken, so READY tells the truth; SGLang only if it released (wakeOnlyAsleep).
    if (released || !api.wakeOnlyAsleep) await wakeCalls(h, api.levels[level].wake, h.signal, false).catch(() => undefined);
    if (api.hold) await callEngine(h.baseUrl, api.hold.resume, h.adminKey, h.signal).catch(() => undefined);
    await h.stateFile.recordSleep(0);
    // Undone after a release: FAILED only on an answer received and different (a failed ask is said, not judged).
    const answer = released && h.checksAnswers ? await checkKnownAnswer(h.target(h.signal), recordedAnswer(h.life())).catch(() => undefined) : undefined;
    const said = answer?.kind === 'differs' ? `; woke without its weights: ${answer.reason}` : answer?.kind === 'not-obtained' ? `; ${NOT_OBTAINED}: ${answer.reason}` : '';
    h.apply({ kind: 'sleep-failed', error: `${why}${said}`, lostWeights: answer?.kind === 'differs' });
    throw failure(why);
  } finally {
    deadline?.clear();
  }
}

/** READY → SLEEPING, said before the engine is asked: prepared, applied to the machine (refused in one line), then released. */
export async function sleepShard(h: SleepHands, level: number, probes: SleepProbes): Promise<void> {
  const p = await prepareSleep(h, level, probes);
  try {
    const why = `sleep level ${p.level} requested (GPUs ${h.spec.gpuIndices.join(',')} hold ${p.before} MiB)`;
    const asked = h.apply({ kind: 'sleep', level: p.level, awakeMib: p.before, why });
    if ('refused' in asked) throw failure(`sleep refused: shard ${h.shardId} ${asked.refused}`);
    await releaseShard(h, p, probes);
  } finally {
    // Its copy made (MemAvailable shows it now) or never to be: the host RAM it was promised is free for the next sleep.
    p.claim?.release();
  }
}

/**
 * SLEEPING → READY: the engine is woken, must answer as at a start
 * (readiness), its GPUs hold most of what they held before the sleep, and
 * it gives its known answer. A failed wake leaves the shard SLEEPING with
 * the reason as its error; a wake without the weights makes it FAILED.
 */
export async function wakeShard(h: SleepHands, given: SleepProbes): Promise<void> {
  const api = judgeSleep(h.shardId, ShardState.READY, h.spec, 1, h.sleepApi);
  const asleep = h.life().sleep;
  const level = asleep?.level ?? 1;
  const awakeMib = asleep?.awakeMib ?? 0;
  // Before anything is asked: SGLang's resume exits on an OOM, vLLM's leaves some tags mapped (wake-gpu-check.ts).
  const taken = await given.gpusTaken?.(h.spec.gpuIndices);
  if (taken !== undefined) throw failure(`wake refused: ${taken}; shard ${h.shardId} is left asleep: stop that process, then wake it`);
  const wakeTimeout = given.wakeTimeout?.(h.spec, level, awakeMib);
  const timeoutMs = wakeTimeout?.ms ?? given.timeoutMs ?? DEFAULT_SLEEP_TIMEOUT_MS;
  if (wakeTimeout) h.log.info({ ...h.fields, sleepLevel: level, timeoutMs, why: wakeTimeout.why }, 'waking shard');
  const probes = { ...given, timeoutMs };
  const deadline = deadlineSignal(timeoutMs, h.signal);
  const signal = deadline.signal;
  try {
    if (api.wakeOnlyAsleep && asleep?.memory === 'released' && (await neverReleased(h, awakeMib, probes, signal))) h.apply({ kind: 'resumed' });
    await wakeCalls(h, api.levels[level].wake, signal, api.wakeOnlyAsleep && h.life().sleep?.memory !== 'released', timeoutMs);
    // The requests held since the sleep run now, on the memory just taken back.
    if (api.hold) await callEngine(h.baseUrl, api.hold.resume, h.adminKey, signal);
    const outcome = await h.readiness(signal, timeoutMs);
    if (!outcome.ready) throw failure(outcome.message);
    const back = awakeMib * AWAKE_SHARE;
    // The GPU memory read (an nvidia-smi spawn without NVML) runs beside the known answer's ask, not before it
    // (bench 14c); READY needs both, and a memory not taken back fails the wake as before.
    const memory = awaitGpuMemory(probes, h.spec.gpuIndices, (m) => m >= back, 'the engine did not take its GPU memory back', signal);
    memory.catch(() => undefined);
    // Answering is not answering correctly: the weights must be back (known-answer.ts), proved by an answer received.
    const settle = async (answer?: Answered) => settleWake(h, `woken: ${outcome.why}; GPUs ${h.spec.gpuIndices.join(',')} hold ${await memory} MiB`, answer);
    await byDeadline(h, h.checksAnswers ? h.answers.proveWake(settle) : settle(), signal);
  } catch (err) {
    const why = errorMessage(err).startsWith('wake failed: ') ? errorMessage(err) : `wake failed: ${errorMessage(err)}`;
    h.apply({ kind: 'wake-failed', error: why });
    if (h.life().state === ShardState.SLEEPING) h.told();
    throw failure(why);
  } finally {
    deadline.clear();
  }
}

/** A wake proved (or not checked): READY, recorded awake; FAILED when the answer received differs. */
async function settleWake(h: SleepHands, woken: string, answer?: Answered): Promise<void> {
  if (answer?.kind === 'differs') {
    const error = `woke without its weights: ${answer.reason}`;
    applyOrThrow(h, { kind: 'woke-without-weights', error, lastOutput: await readLastOutput(h.logPath) });
    throw failure(`wake failed: shard ${h.shardId} ${error}`);
  }
  await h.stateFile.recordSleep(0);
  applyOrThrow(h, { kind: 'woken', why: answer ? `${woken}; ${answer.how}` : woken });
}

/**
 * The wake's proof, waited for until the wake's deadline. Past it the wake
 * fails with the last failed ask as its reason and the shard stays SLEEPING,
 * while the proof goes on: its answer, when it comes, settles the shard.
 */
async function byDeadline(h: SleepHands, proof: Promise<void>, signal: AbortSignal): Promise<void> {
  let onAbort: (() => void) | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    onAbort = () => resolve('deadline');
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    if ((await Promise.race([proof, deadline])) !== 'deadline') return;
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
  proof.catch(() => undefined);
  const last = h.life().error.startsWith(NOT_OBTAINED) ? h.life().error : `${NOT_OBTAINED} before the wake's deadline`;
  throw failure(`${last.split('; asked again in ')[0]}; still asking: READY once it gives its known answer, FAILED if it gives another`);
}

/**
 * Makes a wake's calls in order: the memory's (skipped when `resumed`:
 * SGLang dies of a second resume), then the weights'. The memory is
 * recorded back once resumed, so a retried wake does not resume again.
 */
async function wakeCalls(h: SleepHands, calls: WakeCalls, signal: AbortSignal, resumed: boolean, timeoutMs?: number): Promise<void> {
  if (!resumed) for (const call of calls.resume) await callEngine(h.baseUrl, call, h.adminKey, signal, timeoutMs);
  h.apply({ kind: 'resumed' });
  // A level-2 reload reads the model from disk: the call may take the wake's whole deadline (wake-deadline.ts).
  for (const call of calls.restore) await callEngine(h.baseUrl, call, h.adminKey, signal, timeoutMs);
}

/**
 * Whether the engine, recorded asleep, still holds the memory it held
 * awake: an agent killed between recording a sleep and the engine's
 * release leaves it so, and a restarted agent adopts it SLEEPING. SGLang
 * dies of a resume of memory it never released (set.remove raises
 * KeyError in the scheduler, S:python/sglang/srt/managers/scheduler_components/weight_updater.py:253-255),
 * so its wake then skips the resume. Judged from a reading newer than the
 * wake; unknown (false) without the figure recorded with the sleep.
 */
async function neverReleased(h: SleepHands, awakeMib: number, probes: SleepProbes, signal: AbortSignal): Promise<boolean> {
  if (awakeMib <= 0) return false;
  const now = await awaitFirstReading(probes, h.spec.gpuIndices, signal).catch(() => undefined);
  if (now === undefined || now <= awakeMib * ASLEEP_SHARE) return false;
  h.log.warn({ ...h.fields, awakeMib, nowMib: now }, 'shard recorded asleep still holds its GPU memory: the engine was never released; waking it without a resume');
  return true;
}
