import { ShardState, type StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { ShardId } from '../../../lib/shard-id.js';
import { type Deadline, deadlineSignal } from '../../../lib/deadline.js';
import { formatDuration } from '../../../lib/duration.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import { errorMessage, failure } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import { isTerminal } from '../../../lib/shard-states.js';
import type { Launcher, SupervisorConfig } from '../../config/agent-config.js';
import { servedModelName } from '../../engines/shard-launch.js';
import type { LauncherChoice } from '../launch/choose-launcher.js';
import { type DeathInfo, exitCodeOf } from '../launch/death-watch.js';
import type { EngineFence } from '../launch/end-engine.js';
import { EngineProcess } from '../launch/engine-process.js';
import { awaitReadiness } from '../probes/await-readiness.js';
import { askKnownAnswer, checkKnownAnswer, KNOWN_PROMPT, type KnownAnswerTarget } from '../probes/known-answer.js';

/** How a refusal names the known-answer prompt. */
const KNOWN_PROMPT_LABEL = JSON.stringify(KNOWN_PROMPT);
import { type HealthVerdict, watchHealth } from '../probes/health-watch.js';
import { type EngineLoad, UNKNOWN_LOAD } from '../probes/load-meter.js';
import { portOwnerCheck, type PortOwnerCheck } from '../probes/port-owner-check.js';
import { readInFlight } from '../probes/read-gauge.js';
import { engineSleepApi, type WakeCalls } from '../../engines/engine-sleep-api.js';
import { explainEngineExit } from './explain-engine-exit.js';
import type { RunnerEngine } from './runner-engine.js';
import { ShardFailedError } from './shard-failed-error.js';
import { readLastOutput, recordShardFailure, shardFailureRecord } from './shard-failure.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_STARTUP_TIMEOUT_MS, type DetachReason, KNOWN_ANSWER_FAULT, detachMessage, type HealthChange, isTransitionAllowed, judgeDeath, judgeDrain, judgeSettleStart, judgeSettleWake, type SettleOptions, ShardHealth, stateName } from './shard-lifecycle.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
import { ASLEEP_SHARE, AWAKE_SHARE, awaitFirstReading, awaitGpuMemory, callEngine, checkHostRam, DEFAULT_SLEEP_TIMEOUT_MS, judgeSleep, type SleepProbes } from './shard-sleep.js';
import { StateFileWriter } from './state-file-writer.js';
import { stopShardEngine } from './stop-shard-engine.js';


const S = ShardState;

/** SIGTERM to SIGKILL for what survives a dead engine leader: its work is lost already. */
export const LEFTOVER_GRACE_MS = 2000;

/**
 * SIGTERM to SIGKILL for a sleeping engine: it has nothing worth draining,
 * and its drain would not end. vLLM leaves requests queued while paused
 * unscheduled, so its drain waits out --shutdown-timeout and then aborts
 * them (V:vllm/v1/engine/core.py:1487-1508, 1906-1937); SGLang's drain
 * counts the requests its pause holds (rid_to_state,
 * S:python/sglang/srt/managers/tokenizer_manager.py:796, 804-805, 3119-3146)
 * and never ends before the SIGKILL. Their clients see the connection
 * close, which a router retries elsewhere.
 */
export const ASLEEP_STOP_GRACE_MS = 1000;

/**
 * Where an adopted engine recorded asleep is asked whether it serves: a
 * path that runs no model. SGLang's /health generates, and a paused SGLang
 * holds it, answers 503 after 20 s and marks itself unhealthy, so that its
 * next SIGTERM skips the drain (S:python/sglang/srt/entrypoints/http_server.py:713-725;
 * tokenizer_manager.py:3123-3130). /metrics is open on both engines
 * (V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59;
 * S:python/sglang/srt/utils/auth.py:100); /v1/models is asked beside it.
 */
const ASLEEP_PROBE_PATH = '/metrics';

/**
 * Owns one shard's life: readiness, the health watch after READY, death,
 * drain and stop. Every timer, probe and wait hangs off its own signal.
 *
 * Two scopes end it, and they must not be confused (Nomad's task runner
 * keeps the same two). detach() is the agent going away or the runner being
 * replaced: watching stops, the engine keeps serving. stop() is the shard
 * being stopped: its whole process group is terminated.
 */
export class ShardRunner {
  readonly shardId: ShardId;
  readonly replicaId: string;
  readonly spec: StartShard;
  readonly pid: number;
  readonly pgid: number;
  readonly adopted: boolean;
  readonly servesHttp: boolean;
  readonly logPath: string;
  readonly statePath: string;
  readonly startedAtMs: number;
  private readonly note: string;
  private state: ShardState;
  private error = '';
  private exitCode: number | null = null;
  private signal: NodeJS.Signals | null = null;
  private lastOutput: string[] = [];
  /** The engine process is gone (its group may not be). */
  private dead = false;
  private readonly engine: EngineProcess;
  private readonly launcher: Launcher;
  /** How the rank is probed, and its series: in flight for a drain, running and progress for stall detection. */
  private readonly watch: EngineWatch;
  /** Drained, by this agent or (from the state file) a previous one; cleared by cancelDrain(). */
  private drainRequested: boolean;
  private readonly stateFile: StateFileWriter;
  private healthWatched = false;
  private readonly health = new ShardHealth();
  /** Where the rank serves, derived once: nothing above the runner builds it again. */
  private readonly baseUrl: string | undefined;
  private readonly servedModelName: string;
  /** Who listens on the rank's port: only the engine's own socket is probed (review finding 2). */
  private readonly portOwner: PortOwnerCheck | undefined;
  /** Who held the port while the shard was STARTING, as its status said, until it was gone (onSquatted). */
  private squatter: string | undefined;
  /** detach(): ends every wait, probe and watch of this shard; touches no process. */
  private readonly life = new AbortController();
  /** Why detach() ended the runner; undefined while it watches. */
  private detachedBy: DetachReason | undefined;
  /** Aborted when the shard leaves STARTING, so a readiness wait wakes at once. */
  private readonly leftStarting = new AbortController();
  /** Aborted when the health watch must end: stop begun, engine dead, or detach. */
  private readonly serving = new AbortController();
  private stopping: Promise<ShardSnapshot> | undefined;
  /** A sleep or wake under way: one at a time. */
  private sleepBusy = false;
  /** What the shard's GPUs held before its sleep: a wake waits until they hold most of it again (0: unknown, from an older agent's file). */
  private awakeMib = 0;
  /** Asleep at this level, by this agent or (from the state file) a previous one; 0 when awake. */
  private sleepLevel: number;
  /** The engine answered the wake call of a wake that then failed: its memory is back, and SGLang's would die of a second resume. */
  private memoryResumed = false;
  /** The engine's greedy answer to the known-answer prompt, from its first READY (known-answer.ts); undefined until recorded. */
  private knownAnswer: string | undefined;
  /** The health watch saw the engine asleep while READY: someone else called its /sleep (S6). */
  private sleptUnasked = false;
  /** The known-answer check of a shard awake again after such a sleep, while it runs. */
  private answerRecheck: Promise<void> | undefined;
  /** The known answer being asked for, so that a sleep right after READY waits for it instead of asking twice. */
  private recordingAnswer: Promise<string | undefined> | undefined;
  /** What the health watch's latest /metrics read said of the engine's load; unknown outside the watch. */
  private load: EngineLoad = UNKNOWN_LOAD;
  constructor(
    private readonly ctx: ShardRunnerContext,
    engine: RunnerEngine,
    /** The state of the runner this one replaces (a relaunch), so the first transition is checked from it. */
    previousState: ShardState = S.UNSPECIFIED,
  ) {
    const r = engine.record;
    ({ shardId: this.shardId, replicaId: this.replicaId, spec: this.spec, pid: this.pid, pgid: this.pgid } = r);
    ({ servesHttp: this.servesHttp, createdAtMs: this.startedAtMs, logPath: this.logPath, watch: this.watch } = r);
    ({ adopted: this.adopted, statePath: this.statePath } = engine);
    this.engine = new EngineProcess({ pid: r.pid, pgid: r.pgid, identity: r.identity, child: engine.child }, r.unit);
    this.launcher = r.launcher;
    this.note = engine.note ?? '';
    this.drainRequested = r.drainRequested ?? false;
    this.sleepLevel = r.sleepLevel ?? 0;
    this.awakeMib = r.sleepAwakeMib ?? 0;
    this.knownAnswer = r.knownAnswer;
    this.stateFile = new StateFileWriter(engine.statePath, r.shardId, ctx.log);
    this.state = previousState;
    // The API rank's port, or a worker rank's own /health port (SGLang's); none: judged by staying alive.
    this.baseUrl = r.watch.healthPort > 0 ? `http://127.0.0.1:${r.watch.healthPort}` : undefined;
    this.servedModelName = servedModelName(r.spec);
    const { pid, pgid, unit } = r;
    this.portOwner = this.baseUrl ? portOwnerCheck({ port: r.watch.healthPort, pid, pgid, unit }) : undefined;
    this.life.signal.addEventListener('abort', () => this.serving.abort(), { once: true });
    // A stopped, dead or detached engine holds nothing anyone should read as now.
    this.serving.signal.addEventListener('abort', () => (this.load = UNKNOWN_LOAD), { once: true });
  }

  /** Whether the engine's leader may still run. */
  get running(): boolean {
    return !this.dead;
  }

  get currentState(): ShardState {
    return this.state;
  }

  /**
   * Requests in flight and tokens per second at the health watch's latest
   * read of the engine's /metrics, made every supervisor.health_interval
   * for stall detection; no engine is asked for it. Unknown before READY
   * (no watch yet), once the watch ends (stop, death, detach), with stall
   * detection off (supervisor.stall_timeout 0s: /metrics is not read), for
   * a worker rank, and after a tick whose read failed.
   */
  get engineLoad(): EngineLoad {
    return this.load;
  }

  /**
   * Enters STARTING and starts watching for the engine's death. Called once
   * the engine is recorded on disk and in the registry: a death before that
   * is seen here, since a child's exit status stays readable on it.
   */
  begin(why: string): void {
    this.transition(S.STARTING, why);
    this.engine.watchDeath(this.life.signal, (info) => void this.onDeath(info));
  }

  snapshot(): ShardSnapshot {
    return {
      shardId: this.shardId,
      replicaId: this.replicaId,
      spec: this.spec,
      state: this.state,
      pid: this.pid,
      adopted: this.adopted,
      servesHttp: this.servesHttp,
      error: this.error,
      exitCode: this.exitCode,
      signal: this.signal,
      lastOutput: [...this.lastOutput],
      startedAtMs: this.startedAtMs,
      logPath: this.logPath,
      running: !this.dead,
      drainRequested: this.drainRequested,
      sleepLevel: this.sleepLevel,
      launcher: this.launcher,
      unit: this.engine.unit?.name ?? '',
      note: this.note,
      load: { ...this.load },
    };
  }

  /**
   * The one place the shard changes state: validated against the allowed
   * transitions, logged with the shard's fields, and told. A refused
   * transition is a bug and throws.
   */
  private transition(to: ShardState, why: string): void {
    const from = this.state;
    if (!isTransitionAllowed(from, to)) {
      throw new Error(`shard ${this.shardId}: transition ${stateName(from)} → ${stateName(to)} is not allowed (${why})`);
    }
    this.state = to;
    if (from === S.STARTING) this.leftStarting.abort();
    const fields = { shard: this.shardId, replica: this.replicaId, pid: this.pid, from: stateName(from), to: stateName(to), why };
    if (to === S.FAILED || to === S.UNHEALTHY) this.ctx.log.warn(fields, 'shard state changed');
    else this.ctx.log.info(fields, 'shard state changed');
    try {
      this.ctx.onTransition({ shard: this.snapshot(), from, to, why });
    } catch (err) {
      // A listener's bug must not leave the shard half-way through a change
      // (an exit handled, a timer not cleared).
      this.ctx.log.error({ shard: this.shardId, err: errorMessage(err) }, 'a transition listener threw');
    }
  }

  /**
   * Brings the shard from STARTING to READY, by the same path for a fresh
   * launch and an adopted engine: a rank that serves HTTP must answer
   * /health and list its served model; a worker must stay alive for the
   * settle time. Throws ShardFailedError when it cannot become ready. An
   * engine that will not answer is reported FAILED and left running: the
   * control plane owns the decision to stop it, and stop() (or a new start
   * of this id) takes its whole group down.
   */
  async settle(opts: SettleOptions): Promise<void> {
    const start = judgeSettleStart(this.shardId, this.state);
    if (start === 'serving') return;
    if (start === 'failed') throw this.failedError();
    const wake = AbortSignal.any([this.life.signal, this.leftStarting.signal, ...(opts.signal ? [opts.signal] : [])]);
    // Recorded asleep (an adoption): asked without running the model, which a paused engine holds.
    const asleep = this.sleepLevel > 0 && this.watch.readiness === 'model-listed';
    const outcome = await awaitReadiness({
      baseUrl: this.baseUrl,
      servedModelName: this.servedModelName,
      watch: asleep ? { ...this.watch, healthPath: ASLEEP_PROBE_PATH } : this.watch,
      settleMs: opts.settleMs ?? this.ctx.config.workerSettleMs,
      timeoutMs: opts.timeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS,
      signal: wake,
      portOwner: this.portOwner,
      onWaiting: (squatted) => this.onSquatted(squatted),
    });
    opts.signal?.throwIfAborted();
    if (judgeSettleWake(this.shardId, this.state, this.detachedBy) === 'failed') throw this.failedError();
    if (outcome.ready) {
      this.becomeReady(outcome.why);
      return;
    }
    this.error = outcome.message;
    this.lastOutput = await readLastOutput(this.logPath);
    if (this.state === S.STARTING) this.transition(S.FAILED, outcome.message);
    throw this.failedError();
  }

  /** A process not the engine's holds the port while it starts: status and log say who, until it is gone. */
  private onSquatted(squatted: string | undefined): void {
    // Dead: onDeath is writing the FAILED reason, which names the squatter itself.
    if (this.state !== S.STARTING || this.dead) return;
    this.squatter = squatted;
    this.error = squatted ?? '';
    if (squatted) this.ctx.log.warn({ shard: this.shardId, replica: this.replicaId, pid: this.pid, why: squatted }, 'shard not ready: its port is not the engine\'s');
    // The control plane hears it too: a replica stuck STARTING for a reason an operator can act on.
    this.ctx.onStatus(this.snapshot());
  }

  private becomeReady(why: string): void {
    // A drain that survived the agent: READY first would tell the control
    // plane to send traffic back to an engine an operator is emptying.
    if (this.drainRequested) this.transition(S.DRAINING, `${why}; drained before the agent restarted`);
    // A sleep likewise (issue 30): READY would route traffic to an engine without its weights.
    else if (this.sleepLevel > 0) this.transition(S.SLEEPING, `${why}; asleep (level ${this.sleepLevel}) before the agent restarted`);
    else {
      this.transition(S.READY, why);
      void this.knownAnswerOf();
    }
    this.watchHealth();
    void this.watchKnownAnswer();
  }

  /**
   * supervisor.known_answer_interval: the known answer asked again of a
   * serving engine, for engines that answer /health while generating
   * nothing or garbage (vLLM #37729). A changed answer is a fault of the
   * shard (UNHEALTHY, "known answer changed: …") until the engine gives it
   * again; like every health verdict, reported and never acted on.
   */
  private async watchKnownAnswer(): Promise<void> {
    const intervalMs = this.ctx.config.knownAnswerIntervalMs ?? 0;
    if (intervalMs <= 0 || !this.servesHttp || !this.baseUrl || this.watch.readiness !== 'model-listed') return;
    const signal = this.serving.signal;
    let fault = '';
    try {
      for (;;) {
        await sleep(intervalMs, undefined, { signal });
        if (this.state !== S.READY && this.state !== S.UNHEALTHY && this.state !== S.DRAINING) continue;
        const recorded = this.knownAnswer ?? (await this.knownAnswerOf(true));
        if (recorded === undefined) continue;
        const verdict = await checkKnownAnswer(this.answerTarget(signal), recorded);
        if (this.state !== S.READY && this.state !== S.UNHEALTHY && this.state !== S.DRAINING) continue;
        if (!verdict.ok && fault === '') {
          fault = `${KNOWN_ANSWER_FAULT}: ${verdict.reason}`;
          this.apply(this.health.markFault(fault, this.state));
        } else if (verdict.ok && fault !== '') {
          this.apply(this.health.clearFault(this.state, this.error, fault));
          fault = '';
        }
      }
    } catch {
      // The watch ends with the shard's serving (stop, death, detach).
    }
  }

  /** Whether the shard's wakes are checked by a known answer: the API rank of a sleep profile. */
  private get checksAnswers(): boolean {
    return this.spec.profile?.sleepMode === true && this.servesHttp && this.watch.readiness === 'model-listed' && this.baseUrl !== undefined;
  }

  private answerTarget(signal: AbortSignal): KnownAnswerTarget {
    return { baseUrl: this.baseUrl ?? '', model: this.servedModelName, apiKey: this.watch.apiKey, signal };
  }

  /**
   * The engine's known answer: recorded, or asked now of the READY engine
   * and recorded in memory and in the state file (known-answer.ts).
   * Undefined when the engine gives none; concurrent callers share one ask.
   */
  private knownAnswerOf(periodic = false): Promise<string | undefined> {
    if (!this.checksAnswers && !periodic) return Promise.resolve(undefined);
    if (this.knownAnswer !== undefined) return Promise.resolve(this.knownAnswer);
    this.recordingAnswer ??= (async () => {
      try {
        const asked = await askKnownAnswer(this.answerTarget(this.serving.signal));
        const fields = { shard: this.shardId, replica: this.replicaId };
        if (!asked.ok) {
          this.ctx.log.warn({ ...fields, why: asked.reason }, 'the engine gave no known answer; its wakes cannot be checked until it does');
          return undefined;
        }
        // Only an engine still READY answered with its weights; one asleep or stopping meanwhile proves nothing.
        if (this.state !== S.READY) return undefined;
        this.knownAnswer = asked.text;
        this.ctx.log.info({ ...fields, answer: asked.text }, 'known answer recorded');
        await this.stateFile.recordKnownAnswer(asked.text);
        return asked.text;
      } catch {
        return undefined;
      } finally {
        this.recordingAnswer = undefined;
      }
    })();
    return this.recordingAnswer;
  }

  /**
   * The health watch of a serving rank: /health, and stall detection when
   * the engine names its metrics. UNHEALTHY is reported, not acted on:
   * killing here would race the control plane, which owns the decision to
   * replace an engine (a stalled one included).
   */
  private watchHealth(): void {
    if (!this.baseUrl || this.life.signal.aborted || this.healthWatched) return;
    this.healthWatched = true;
    const { healthIntervalMs: intervalMs, stallTimeoutMs } = this.ctx.config;
    const { healthPath, probeTimeoutMs, runningGauges, progressCounters, inFlightGauges } = this.watch;
    const stall = { runningGauges, progressCounters, stallTimeoutMs, inFlightGauges };
    const portOwner = this.portOwner;
    watchHealth({
      baseUrl: this.baseUrl,
      intervalMs,
      healthPath,
      probeTimeoutMs,
      signal: this.serving.signal,
      stall,
      portOwner,
      onVerdict: (v) => this.applyHealth(v),
      // SGLang's /health generates: held while asleep (EngineSleepApi.hold), it would time out and flap the shard on waking.
      paused: () => this.state === S.SLEEPING && engineSleepApi(this.spec.profile?.engine ?? '')?.healthNeedsModel === true,
      // A sleep-mode engine's /sleep takes no key: one the agent did not ask for makes the shard UNHEALTHY (S6).
      sleepGauge: this.spec.profile?.sleepMode ? engineSleepApi(this.spec.profile.engine)?.awakeGauge : undefined,
      onLoad: (load) => {
        if (!this.serving.signal.aborted) this.load = load;
      },
    });
    this.apply(this.health.serving());
  }

  /** One of the shard's GPUs has a fault (ShardHealth.markFault); the engine is not touched. */
  markGpuFault(reason: string): void {
    this.apply(this.health.markFault(reason, this.state));
  }

  /** The shard's GPUs are sound again: back to READY, unless the health probe says otherwise. */
  clearGpuFault(): void {
    this.apply(this.health.clearFault(this.state, this.error));
  }

  private applyHealth(v: HealthVerdict): void {
    // Said also when no transition follows (a faulted GPU already made it UNHEALTHY): why it stays so.
    this.ctx.log.debug({ shard: this.shardId, replica: this.replicaId, healthy: v.healthy, why: v.why }, 'health probe verdict');
    if (v.cause === 'asleep' && this.state === S.READY) this.sleptUnasked = true;
    if (v.healthy && this.sleptUnasked && this.state === S.UNHEALTHY) {
      // Woken by whoever put it to sleep, perhaps without its weights (a level 2 and a bare /wake_up): READY only with its known answer.
      if (!this.answerRecheck) this.answerRecheck = this.recheckAfterUnaskedSleep(v).finally(() => (this.answerRecheck = undefined));
      return;
    }
    this.apply(this.health.judge(v, this.state));
  }

  /** After a sleep the agent did not ask for: the engine's known answer decides between READY and FAILED. */
  private async recheckAfterUnaskedSleep(v: HealthVerdict): Promise<void> {
    const verdict = this.checksAnswers ? await checkKnownAnswer(this.answerTarget(this.serving.signal), this.knownAnswer).catch(() => undefined) : undefined;
    if (this.state !== S.UNHEALTHY || this.serving.signal.aborted) return;
    if (verdict && !verdict.ok) {
      this.error = `woke without its weights after a sleep the agent did not ask for: ${verdict.reason}`;
      this.transition(S.FAILED, this.error);
      return;
    }
    if (this.checksAnswers && verdict === undefined) return; // asked nothing: the next tick asks again
    this.sleptUnasked = false;
    this.apply(this.health.judge({ ...v, why: verdict ? `${v.why}; ${verdict.how}` : v.why }, this.state));
  }

  /** Carries out what the health judgement decided, through the one transition function. */
  private apply(change: HealthChange | undefined): void {
    if (change?.error !== undefined) this.error = change.error;
    if (change?.to !== undefined) this.transition(change.to, change.why);
  }

  private failedError(): ShardFailedError {
    const details = { exitCode: this.exitCode, signal: this.signal, lastOutput: this.lastOutput };
    return new ShardFailedError(this.shardId, `shard ${this.shardId}: ${this.error || stateName(this.state)}`, details);
  }

  /** Carries out what a death means (judgeDeath), judged again after each await: the state may change meanwhile. */
  private async onDeath(info: DeathInfo): Promise<void> {
    if (this.dead || this.life.signal.aborted) return;
    this.dead = true;
    this.serving.abort();
    if (info.known) {
      this.signal = info.signal;
      this.exitCode = exitCodeOf(info.code, info.signal);
    }
    // Read before the state changes, so the report carries the engine's own last words.
    const lastOutput = await readLastOutput(this.logPath);
    if (this.life.signal.aborted) return;
    if (judgeDeath(this.state, info).reap) {
      const graceMs = Math.min(LEFTOVER_GRACE_MS, this.ctx.config.stopGraceMs);
      await this.engine.reapLeftovers({ graceMs, signal: this.life.signal, log: this.ctx.log.child({ shard: this.shardId, replica: this.replicaId }) });
    }
    if (this.life.signal.aborted) return;
    const verdict = judgeDeath(this.state, info);
    if (verdict.to === undefined || verdict.error === undefined) return;
    // An engine that refused its command line says so in its last line, not in its exit code.
    const why = this.state === S.STARTING ? explainEngineExit(lastOutput) : undefined;
    const squatter = this.state === S.STARTING ? await this.squatterAtDeath() : undefined;
    if (this.life.signal.aborted) return;
    const error = [verdict.error, squatter, why].filter((part) => part !== undefined).join(': ');
    this.error = error;
    this.lastOutput = lastOutput;
    if (verdict.record) {
      const opts = { logDir: this.ctx.config.logDir, logPath: this.logPath, log: this.ctx.log };
      await recordShardFailure(opts, shardFailureRecord(this.snapshot(), new Date()));
    }
    // The record took a moment: a stop may have begun meanwhile.
    if (this.life.signal.aborted || judgeDeath(this.state, info).error !== verdict.error) return;
    this.transition(verdict.to, error);
  }

  /**
   * Who holds the port of an engine that died while STARTING, when not the
   * engine: vLLM and SGLang exit 1 when their bind or listen finds the port
   * taken (uvicorn logs the errno and exits), and "exited with code 1" alone
   * sent operators to the engine's log to find the squatter the agent had
   * already seen (review N7). Asked after the reap, so no process of the
   * engine's is left to hold it; the squatter last seen while STARTING
   * answers for one that left between the engine's failed bind and now.
   */
  private async squatterAtDeath(): Promise<string | undefined> {
    const owner = await this.portOwner?.().catch(() => undefined);
    return owner?.owner === 'other' ? owner.reason : this.squatter;
  }

  /** What ends everything of this engine: its unit's cgroup, or its process group. */
  fence(): EngineFence {
    return this.engine.fence();
  }

  /** Terminates the whole process group (SIGTERM, `graceMs`, SIGKILL); concurrent calls share one stop. */
  stop(opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    this.stopping ??= this.doStop(opts).finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  private async doStop(opts: { graceMs?: number; signal?: AbortSignal }): Promise<ShardSnapshot> {
    const asked = opts.graceMs ?? this.ctx.config.stopGraceMs;
    const asleep = this.state === S.SLEEPING;
    const graceMs = asleep ? Math.min(asked, ASLEEP_STOP_GRACE_MS) : asked;
    const why = asleep ? `stop requested while asleep: nothing to drain (grace ${formatDuration(graceMs)})` : `stop requested (grace ${formatDuration(graceMs)})`;
    if (this.state !== S.STOPPING && !isTerminal(this.state)) this.transition(S.STOPPING, why);
    this.serving.abort();
    const log = this.ctx.log.child({ shard: this.shardId, pid: this.pid });
    const stopped = await stopShardEngine(this.engine, { graceMs, signal: opts.signal, log, deathSeen: () => this.dead });
    if (stopped.exit && !this.dead) {
      this.signal = stopped.exit.signal;
      this.exitCode = exitCodeOf(stopped.exit.code, stopped.exit.signal);
    }
    // Gone either way: terminated, or its pid names another process now.
    this.dead = true;
    this.detach('stopped');
    // Gone from disk before STOPPED is announced: whoever hears STOPPED may
    // rely on nothing of the shard being left, here or after a restart.
    await this.stateFile.remove();
    if (this.state === S.STOPPING) this.transition(S.STOPPED, stopped.why);
    return this.snapshot();
  }

  /**
   * READY or UNHEALTHY → DRAINING (the control plane routes elsewhere); a
   * repeat is a no-op. The drain is recorded in the state file before this
   * resolves, so an agent restart (kill -9 included) brings the shard back
   * DRAINING: it once came back READY, and traffic returned to an engine
   * being emptied for maintenance.
   */
  async drain(): Promise<ShardSnapshot> {
    const step = judgeDrain(this.shardId, this.state, false);
    if (step.to !== undefined) {
      this.drainRequested = true;
      this.transition(step.to, step.why);
    }
    await this.stateFile.recordDrain(true);
    return this.snapshot();
  }

  /**
   * Undoes a drain: DRAINING → READY (reported, so the control plane routes
   * to it again), then UNHEALTHY at once if the health watch found the
   * engine bad while it drained. Throws for a shard that is not DRAINING.
   */
  async cancelDrain(): Promise<ShardSnapshot> {
    const step = judgeDrain(this.shardId, this.state, true);
    this.drainRequested = false;
    this.error = '';
    if (step.to !== undefined) this.transition(step.to, step.why);
    this.applyHealth(this.health.lastVerdict);
    await this.stateFile.recordDrain(false);
    return this.snapshot();
  }

  /**
   * READY → SLEEPING: the engine frees its GPU memory and lives on (issue
   * 30). SLEEPING is reported first, so the control plane routes elsewhere
   * before the engine aborts what it holds (vLLM's mode=abort); then the
   * engine is asked, and the shard's GPU readings must fall to
   * ASLEEP_SHARE of what they held. A refusal throws before anything is
   * touched; a sleep that fails after SLEEPING was reported is undone (the
   * engine woken) and the shard is READY again with the reason as its error.
   */
  async sleep(level: number, probes: SleepProbes): Promise<ShardSnapshot> {
    const api = judgeSleep(this.shardId, this.state, this.spec, level);
    const lvl = level as 1 | 2;
    if (!this.baseUrl || !this.servesHttp) throw failure(`sleep refused: rank ${this.spec.rank} of shard ${this.shardId} serves no API; sleep its replica's rank 0`);
    if (this.sleepBusy) throw failure(`sleep refused: shard ${this.shardId} is already being put to sleep or woken`);
    // Busy from here: the checks below wait, and a second SleepShard meanwhile must not pass them too.
    this.sleepBusy = true;
    let deadline: Deadline | undefined;
    try {
      const gpus = this.spec.gpuIndices;
      // From a reading newer than the request: one just after READY may predate the engine's memory.
      const before = await awaitFirstReading(probes, gpus, this.life.signal);
      if (api.hostCopy(lvl)) await checkHostRam(lvl, before, probes.meminfoPath);
      if (api.mustBeIdle) {
        const held = await this.inFlight();
        if (held !== 0) throw failure(`sleep refused: ${this.spec.profile?.engine} must be idle to release its memory and holds ${held ?? 'an unknown number of'} request(s); drain it first`);
      }
      // What its wake is checked against, from the engine awake: none, and a woken engine on garbage weights would pass as READY.
      if (this.checksAnswers && (await this.knownAnswerOf()) === undefined) {
        throw failure(`sleep refused: shard ${this.shardId} gave no answer to ${KNOWN_PROMPT_LABEL} to check its wake against (see the agent's log); a shard whose wake cannot be checked is not put to sleep`);
      }
      if (this.state !== S.READY) throw failure(`sleep refused: shard ${this.shardId} is ${stateName(this.state)}; only a READY shard can sleep`);
      deadline = deadlineSignal(probes.timeoutMs ?? DEFAULT_SLEEP_TIMEOUT_MS, this.life.signal);
      const signal = deadline.signal;
      this.awakeMib = before;
      this.sleepLevel = lvl;
      this.transition(S.SLEEPING, `sleep level ${lvl} requested (GPUs ${gpus.join(',')} hold ${before} MiB)`);
      let released = false;
      try {
        // Recorded before the engine is asked: an agent killed meanwhile adopts it SLEEPING (a wake of an awake vLLM is harmless; of an awake SGLang, not).
        await this.stateFile.recordSleep(lvl, before);
        // SGLang: new requests are held in its tokenizer from here, any that raced the idle check aborted.
        if (api.hold) await callEngine(this.baseUrl, api.hold.pause, this.adminKey, signal);
        await callEngine(this.baseUrl, api.sleep(lvl), this.adminKey, signal);
        released = true;
        this.memoryResumed = false;
        const after = await awaitGpuMemory(probes, gpus, (mib) => mib <= before * ASLEEP_SHARE, 'the engine did not free its GPU memory', signal);
        this.error = '';
        this.ctx.log.info({ shard: this.shardId, replica: this.replicaId, sleepLevel: lvl, beforeMib: before, afterMib: after }, 'shard asleep: GPU memory released');
        this.ctx.onStatus(this.snapshot());
      } catch (err) {
        const why = `sleep failed: ${errorMessage(err)}`;
        // The engine may be half asleep: woken, so READY tells the truth; SGLang only if it released (wakeOnlyAsleep).
        if (released || !api.wakeOnlyAsleep) await this.wakeCalls(api.wake(lvl), this.life.signal, false).catch(() => undefined);
        if (api.hold) await callEngine(this.baseUrl, api.hold.resume, this.adminKey, this.life.signal).catch(() => undefined);
        this.error = why;
        this.sleepLevel = 0;
        await this.stateFile.recordSleep(0);
        // Undone after a release: READY only with the weights back, as after any wake.
        const answer = released && this.checksAnswers ? await checkKnownAnswer(this.answerTarget(this.life.signal), this.knownAnswer).catch(() => undefined) : undefined;
        if (answer && !answer.ok) this.error = `${why}; woke without its weights: ${answer.reason}`;
        if ((this.state as ShardState) === S.SLEEPING) this.transition(answer && !answer.ok ? S.FAILED : S.READY, this.error);
        throw failure(why);
      }
    } finally {
      deadline?.clear();
      this.sleepBusy = false;
    }
    return this.snapshot();
  }

  /**
   * SLEEPING → READY: the engine is woken, must answer as at a start
   * (readiness) and its GPUs hold most of what they held before the sleep.
   * A failed wake leaves the shard SLEEPING with the reason as its error.
   */
  async wake(probes: SleepProbes): Promise<ShardSnapshot> {
    if (this.state !== S.SLEEPING) throw failure(`wake refused: shard ${this.shardId} is ${stateName(this.state)}; only a SLEEPING shard can be woken`);
    const api = judgeSleep(this.shardId, S.READY, this.spec, 1);
    if (!this.baseUrl || this.sleepBusy) throw failure(`wake refused: shard ${this.shardId} is already being put to sleep or woken`);
    this.sleepBusy = true;
    const level = (this.sleepLevel === 2 ? 2 : 1) as 1 | 2;
    const timeoutMs = probes.timeoutMs ?? DEFAULT_SLEEP_TIMEOUT_MS;
    const deadline = deadlineSignal(timeoutMs, this.life.signal);
    const signal = deadline.signal;
    try {
      if (api.wakeOnlyAsleep && !this.memoryResumed && (await this.neverReleased(probes, signal))) this.memoryResumed = true;
      const calls = api.wake(level);
      await this.wakeCalls(calls, signal, this.memoryResumed && api.wakeOnlyAsleep);
      // The requests held since the sleep run now, on the memory just taken back.
      if (api.hold) await callEngine(this.baseUrl, api.hold.resume, this.adminKey, signal);
      const outcome = await awaitReadiness({
        baseUrl: this.baseUrl,
        servedModelName: this.servedModelName,
        watch: this.watch,
        settleMs: 0,
        timeoutMs,
        signal,
        portOwner: this.portOwner,
      });
      if (!outcome.ready) throw failure(outcome.message);
      const back = this.awakeMib * AWAKE_SHARE;
      const mib = await awaitGpuMemory(probes, this.spec.gpuIndices, (m) => m >= back, 'the engine did not take its GPU memory back', signal);
      // Answering is not answering correctly: the weights must be back (known-answer.ts).
      const answer = this.checksAnswers ? await checkKnownAnswer(this.answerTarget(signal), this.knownAnswer) : undefined;
      if (this.state !== S.SLEEPING) throw failure(`shard ${this.shardId} became ${stateName(this.state)} while waking`);
      if (answer && !answer.ok) {
        this.error = `woke without its weights: ${answer.reason}`;
        this.lastOutput = await readLastOutput(this.logPath);
        if ((this.state as ShardState) === S.SLEEPING) this.transition(S.FAILED, this.error);
        throw failure(`wake failed: shard ${this.shardId} ${this.error}`);
      }
      this.error = '';
      this.sleepLevel = 0;
      this.memoryResumed = false;
      await this.stateFile.recordSleep(0);
      if ((this.state as ShardState) !== S.SLEEPING) throw failure(`shard ${this.shardId} became ${stateName(this.state)} while waking`);
      const checked = answer ? `; ${answer.how}` : '';
      this.transition(S.READY, `woken: ${outcome.why}; GPUs ${this.spec.gpuIndices.join(',')} hold ${mib} MiB${checked}`);
    } catch (err) {
      const why = errorMessage(err).startsWith('wake failed: ') ? errorMessage(err) : `wake failed: ${errorMessage(err)}`;
      if (this.state === S.SLEEPING) {
        this.error = why;
        this.ctx.onStatus(this.snapshot());
      }
      throw failure(why);
    } finally {
      deadline.clear();
      this.sleepBusy = false;
    }
    return this.snapshot();
  }

  /**
   * The key of the sleep API's calls: SGLang's pause, memory and reload
   * routes are ADMIN_OPTIONAL, which take only --admin-api-key when it is
   * set, and --api-key otherwise (S:python/sglang/srt/utils/auth.py:123-138);
   * vLLM's dev routes take no key and ignore it.
   */
  private get adminKey(): string {
    return this.watch.adminApiKey || this.watch.apiKey;
  }

  /**
   * Makes a wake's calls in order: the memory's (skipped when `resumed`:
   * SGLang dies of a second resume), then the weights'. memoryResumed is
   * set once the memory is back, so a retried wake does not resume again.
   */
  private async wakeCalls(calls: WakeCalls, signal: AbortSignal, resumed: boolean): Promise<void> {
    if (!this.baseUrl) return;
    if (!resumed) for (const call of calls.resume) await callEngine(this.baseUrl, call, this.adminKey, signal);
    this.memoryResumed = true;
    for (const call of calls.restore) await callEngine(this.baseUrl, call, this.adminKey, signal);
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
  private async neverReleased(probes: SleepProbes, signal: AbortSignal): Promise<boolean> {
    if (this.awakeMib <= 0) return false;
    const now = await awaitFirstReading(probes, this.spec.gpuIndices, signal).catch(() => undefined);
    if (now === undefined || now <= this.awakeMib * ASLEEP_SHARE) return false;
    this.ctx.log.warn(
      { shard: this.shardId, replica: this.replicaId, awakeMib: this.awakeMib, nowMib: now },
      'shard recorded asleep still holds its GPU memory: the engine was never released; waking it without a resume',
    );
    return true;
  }

  /** Requests the engine holds, running and waiting, from the engine's own gauges; undefined when it cannot tell. */
  async inFlight(): Promise<number | undefined> {
    if (!this.baseUrl || this.watch.inFlightGauges.length === 0) return undefined;
    return readInFlight(this.baseUrl, this.watch.inFlightGauges, this.life.signal, this.portOwner);
  }

  /**
   * Every watch and wait of this runner ends; no process is touched. `why`
   * says whose act it is, so that a readiness wait cut short tells its
   * caller the truth: the agent going away, this runner replaced by a
   * relaunch under the same id, or the shard stopped (its group is gone).
   * The first reason holds.
   */
  detach(why: DetachReason): void {
    if (this.life.signal.aborted) return;
    this.detachedBy = why;
    this.life.abort(failure(detachMessage(this.shardId, why)));
  }
}

/** What every runner of one supervisor shares. */
export interface ShardRunnerContext {
  config: SupervisorConfig;
  log: Logger;
  /** Hears every transition of the shard, after it is made and logged. */
  onTransition: (t: ShardTransition) => void;
  /** Hears a change of what the shard's status says without a change of state (a squatter on a STARTING shard's port). */
  onStatus: (shard: ShardSnapshot) => void;
  /** The launcher new engines get (config.launcher with auto decided); config.launcher decided here when absent. */
  launcher?: () => Promise<LauncherChoice>;
}
