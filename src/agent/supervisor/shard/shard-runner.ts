import { ShardState, type StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { ShardId } from '../../../lib/shard-id.js';
import { formatDuration } from '../../../lib/duration.js';
import type { EngineRecord } from '../../../lib/files/state-file.js';
import { errorMessage, failure } from '../../../lib/errors.js';
import { servedModelName } from '../../engines/shard-launch.js';
import type { EngineFence } from '../launch/end-engine.js';
import { EngineProcess } from '../launch/engine-process.js';
import { awaitReadiness, type Readiness } from '../probes/await-readiness.js';
import { type HealthVerdict, watchHealth } from '../probes/health-watch.js';
import { type EngineLoad, UNKNOWN_LOAD } from '../probes/load-meter.js';
import { portOwnerCheck, type PortOwnerCheck } from '../probes/port-owner-check.js';
import { readInFlight } from '../probes/read-gauge.js';
import { onEngineDeath } from './shard-death.js';
import type { RunnerEngine } from '../launch/runner-engine.js';
import { knownAnswerAsk } from '../probes/known-answer-ask.js';
import { KNOWN_ANSWER_TIMEOUT_MS } from '../probes/known-answer.js';
import { checkStartAnswer, contentAnswer } from './shard-start-answer.js';
import { ShardAnswers } from './shard-answers.js';
import { adoptedSleep, unseenWakeAnswer } from './adopted-sleep-steps.js';
import type { ShardHands } from './shard-hands.js';
import { shardFailedError } from './shard-failed-error.js';
import { readLastOutput } from './shard-failure.js';
import { type GangFault, newShardLife, nextShard, type ShardChange, type ShardLife, type ShardNext, isTrouble, stateName } from './shard-machine.js';
import { DEFAULT_STARTUP_TIMEOUT_MS, type DetachReason, detachMessage, judgeSettleStart, judgeSettleWake, type SettleOptions } from './shard-settle.js';
import type { ShardSnapshot } from './shard-snapshot.js';
import { snapshotShard } from './snapshot-shard.js';
import type { ShardRunnerContext } from './shard-runner-context.js';
import { ASLEEP_PROBE_PATH, ASLEEP_STOP_GRACE_MS, type SleepProbes } from './shard-sleep.js';
import { type SleepHands, sleepShard, wakeShard } from './shard-sleep-steps.js';
import { ShardEngineFacts } from './shard-engine-facts.js';
import { StateFileWriter } from './state-file-writer.js';
import { stopShardEngine } from './stop-shard-engine.js';

const S = ShardState;

/**
 * The hands of one shard: its engine process, signals, probes, state file
 * and listeners. What the shard is lives in one ShardLife, changed only by
 * apply(), which asks the pure machine (shard-machine.ts), logs and tells;
 * every await's outcome comes back as a change, so it is judged against the
 * shard as it is then.
 *
 * Two scopes end it, and they must not be confused (Nomad's task runner
 * keeps the same two). detach() is the agent going away or the runner being
 * replaced: watching stops, the engine keeps serving. stop() is the shard
 * being stopped: its whole process group is terminated.
 */
export class ShardRunner {
  readonly record: EngineRecord;
  private life: ShardLife;
  private readonly launched: RunnerEngine;
  private readonly engine: EngineProcess;
  private readonly stateFile: StateFileWriter;
  private readonly answers: ShardAnswers;
  /** What the steps this runner lends its shard to may use (shard-hands.ts). */
  private readonly hands: ShardHands;
  /** Where the rank serves: the API port, or a worker rank's own /health port (SGLang's); none: judged by staying alive. */
  private readonly baseUrl: string | undefined;
  /** Who listens on the rank's port: only the engine's own socket is probed (review finding 2). */
  private readonly portOwner: PortOwnerCheck | undefined;
  /** detach(): ends every wait, probe and watch of this shard; touches no process. */
  private readonly lifeScope = new AbortController();
  /** Why detach() ended the runner; undefined while it watches. */
  private detachedBy: DetachReason | undefined;
  /** Aborted when the shard leaves STARTING, so a readiness wait wakes at once. */
  private readonly leftStarting = new AbortController();
  /** Aborted when the health watch must end: stop begun, engine dead, or detach. */
  private readonly serving = new AbortController();
  private healthWatched = false;
  private stopping: Promise<ShardSnapshot> | undefined;
  /** A death being told (onEngineDeath): a stop asked meanwhile (a gang's fence) waits for it, so the crash is reported, not masked. */
  private dying: Promise<void> | undefined;
  /** A sleep or wake under way: one at a time. */
  private sleepBusy = false;
  /** What the health watch's latest /metrics read said of the engine's load; unknown outside the watch. */
  private load: EngineLoad = UNKNOWN_LOAD;
  constructor(
    private readonly ctx: ShardRunnerContext,
    engine: RunnerEngine,
    /** The state of the runner this one replaces (a relaunch), so the first transition is checked from it; or a shard ended before this agent (endedShard). */
    from: ShardState | ShardLife = S.UNSPECIFIED,
  ) {
    const r = engine.record;
    this.record = r;
    this.launched = engine;
    this.engine = new EngineProcess({ pid: r.pid, pgid: r.pgid, identity: r.identity, child: engine.child }, r.unit);
    this.life = typeof from === 'object' ? from : newShardLife({ state: from, drain: r.drainRequested, sleepLevel: r.sleepLevel, awakeMib: r.sleepAwakeMib, knownAnswer: r.knownAnswer, knownAnswerToken: r.knownAnswerToken });
    this.stateFile = new StateFileWriter(engine.statePath, r.shardId, ctx.log);
    this.baseUrl = r.watch.healthPort > 0 ? `http://127.0.0.1:${r.watch.healthPort}` : undefined;
    const { pid, pgid, unit } = r;
    this.portOwner = this.baseUrl ? portOwnerCheck({ port: r.watch.healthPort, pid, pgid, unit }) : undefined;
    this.hands = {
      ...{ shardId: r.shardId, spec: r.spec, fields: { shard: r.shardId, replica: r.replicaId }, logPath: r.logPath, logDir: ctx.config.logDir },
      ...{ stopGraceMs: ctx.config.stopGraceMs, baseUrl: this.baseUrl ?? '', adminKey: r.watch.adminApiKey || r.watch.apiKey, signal: this.lifeScope.signal },
      ...{ log: ctx.log, stateFile: this.stateFile, portOwner: this.portOwner, sleepApi: r.watch.sleepApi },
      facts: new ShardEngineFacts({ engine: r.spec.profile?.engine ?? '', baseUrl: this.baseUrl ?? '', apiKey: r.watch.apiKey, stateFile: this.stateFile, log: ctx.log, fields: { shard: r.shardId, replica: r.replicaId }, pid: r.pid }, r),
      // The API rank of a sleep profile has its wakes checked by a known answer.
      checksAnswers: r.spec.profile?.sleepMode === true && r.servesHttp && r.watch.readiness === 'model-listed' && this.baseUrl !== undefined,
      contentAnswer: () => contentAnswer(this.ctx.knownAnswers, this.launched.modelDigest, this.spec.profile?.name ?? '', this.hands.facts.version),
      life: () => this.life,
      apply: (c) => this.apply(c),
      told: () => this.ctx.onStatus(this.snapshot()),
      target: (signal) => ({ baseUrl: this.baseUrl ?? '', model: servedModelName(r.spec), apiKey: r.watch.apiKey, signal, ask: knownAnswerAsk(r.spec), timeoutMs: ctx.config.knownAnswerTimeoutMs ?? KNOWN_ANSWER_TIMEOUT_MS }),
      inFlight: () => this.inFlight(),
      readiness: (signal, timeoutMs) => this.readiness(signal, timeoutMs, 0),
      stopServing: () => this.serving.abort(),
      reapLeftovers: (graceMs) => this.engine.reapLeftovers({ graceMs, signal: this.lifeScope.signal, log: ctx.log.child({ shard: r.shardId, replica: r.replicaId }) }),
      snapshot: () => this.snapshot(),
      firstToGo: (endedAtMs) => ctx.firstToGo?.(this.snapshot(), endedAtMs) ?? Promise.resolve(undefined),
    };
    this.answers = new ShardAnswers(this.hands);
    this.lifeScope.signal.addEventListener('abort', () => this.serving.abort(), { once: true });
    // A stopped, dead or detached engine holds nothing anyone should read as now.
    this.serving.signal.addEventListener('abort', () => (this.load = UNKNOWN_LOAD), { once: true });
  }

  get shardId(): ShardId { return this.record.shardId; }
  get replicaId(): string { return this.record.replicaId; }
  get spec(): StartShard { return this.record.spec; }
  get pid(): number { return this.record.pid; }
  get pgid(): number { return this.record.pgid; }
  get servesHttp(): boolean { return this.record.servesHttp; }
  get logPath(): string { return this.record.logPath; }
  get startedAtMs(): number { return this.record.createdAtMs; }
  get adopted(): boolean { return this.launched.adopted; }
  get statePath(): string { return this.launched.statePath; }

  /** Whether the engine's leader may still run. */
  get running(): boolean { return !this.life.dead; }
  get currentState(): ShardState { return this.life.state; }

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

  /** Enters STARTING and watches for the engine's death; a death before this is seen too (a child's exit status stays readable). */
  begin(why: string): void {
    this.apply({ kind: 'begin', why });
    this.engine.watchDeath(this.lifeScope.signal, (info) => {
      this.dying = onEngineDeath(this.hands, info).catch((err: unknown) => this.ctx.log.error({ shard: this.shardId, err }, 'telling an engine death failed'));
    });
  }

  snapshot(): ShardSnapshot {
    return snapshotShard(this.record, this.life, this.launched, this.engine.unit?.name ?? '', this.load, this.hands.facts.version, this.hands.facts.sleepNote(this.life.sleep));
  }

  /**
   * The one place the shard changes: the machine judges the change, and a
   * change of state is logged with the shard's fields and told. A refusal
   * is returned for the caller to report; a transition the machine does not
   * allow is a bug and throws.
   */
  private apply(change: ShardChange): ShardNext {
    const from = this.life.state;
    const next = nextShard(this.life, change, this.shardId);
    if ('refused' in next) return next;
    this.life = next.life;
    const to = next.life.state;
    if (to === from) return next;
    if (from === S.STARTING) this.leftStarting.abort();
    const fields = { shard: this.shardId, replica: this.replicaId, pid: this.pid, from: stateName(from), to: stateName(to), why: next.why };
    if (isTrouble(to)) this.ctx.log.warn(fields, 'shard state changed');
    else this.ctx.log.info(fields, 'shard state changed');
    try {
      this.ctx.onTransition({ shard: this.snapshot(), from, to, why: next.why });
    } catch (err) {
      // A listener's bug must not leave the shard half-way through a change (an exit handled, a timer not cleared).
      this.ctx.log.error({ shard: this.shardId, err: errorMessage(err) }, 'a transition listener threw');
    }
    return next;
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
    const start = judgeSettleStart(this.shardId, this.life.state);
    if (start === 'serving') return;
    if (start === 'failed') throw shardFailedError(this.shardId, this.life);
    const wake = AbortSignal.any([this.lifeScope.signal, this.leftStarting.signal, ...(opts.signal ? [opts.signal] : [])]);
    // An adoption asks the engine whether it sleeps, its record may be wrong either way; found awake though recorded
    // asleep, its known answer decides READY, not its bytes' (adopted-sleep-steps.ts).
    const wokeUnseen = this.adopted && this.life.state === S.STARTING && this.record.watch.readiness === 'model-listed' ? await adoptedSleep(this.hands, wake) : false;
    // Recorded asleep (an adoption): asked without running the model, which a paused engine holds.
    const asleep = this.life.sleep !== undefined && this.record.watch.readiness === 'model-listed';
    const outcome = await this.readiness(wake, opts.timeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS, opts.settleMs ?? this.ctx.config.workerSettleMs, asleep);
    opts.signal?.throwIfAborted();
    if (judgeSettleWake(this.shardId, this.life.state, this.detachedBy) === 'failed') throw shardFailedError(this.shardId, this.life);
    if (outcome.ready) {
      // Answering is not answering as these bytes did before (issue 51): checked before READY is said.
      const wrong: { error?: string; note?: string } = wokeUnseen ? await unseenWakeAnswer(this.hands, wake) : { error: await this.startAnswer(wake) };
      if (wrong.error !== undefined) {
        this.apply({ kind: 'not-ready', error: wrong.error, lastOutput: await readLastOutput(this.logPath) });
        throw shardFailedError(this.shardId, this.life);
      }
      if (wokeUnseen) await this.stateFile.recordSleep(0);
      if (judgeSettleWake(this.shardId, this.life.state, this.detachedBy) === 'failed') throw shardFailedError(this.shardId, this.life);
      this.apply({ kind: 'answered', why: `${outcome.why}${wrong.note ?? ''}` });
      if (this.life.state === S.READY) void this.answers.of(this.serving.signal);
      if (this.life.state === S.READY && this.servesHttp) void this.hands.facts.read(this.serving.signal);
      this.watchHealth();
      const intervalMs = this.ctx.config.knownAnswerIntervalMs ?? 0;
      if (intervalMs > 0 && this.servesHttp && this.baseUrl && this.record.watch.readiness === 'model-listed') void this.answers.watch(intervalMs, this.serving.signal);
      return;
    }
    this.apply({ kind: 'not-ready', error: outcome.message, lastOutput: await readLastOutput(this.logPath) });
    throw shardFailedError(this.shardId, this.life);
  }

  /** The start's known answer (shard-start-answer.ts), for a start from the store's content; undefined when right, not obtained or not asked. */
  private async startAnswer(signal: AbortSignal): Promise<string | undefined> {
    const digest = this.launched.modelDigest;
    const book = this.ctx.knownAnswers;
    // An adopted engine asleep holds no weights to answer with: its wake is checked instead (contentAnswer).
    if (!digest || !book || !this.servesHttp || !this.baseUrl || this.record.watch.readiness !== 'model-listed' || this.life.state !== S.STARTING || this.life.sleep !== undefined) return undefined;
    return checkStartAnswer(this.hands, book, digest, this.spec.profile?.name ?? '', signal).catch(() => undefined);
  }

  private readiness(signal: AbortSignal, timeoutMs: number, settleMs: number, asleep = false): Promise<Readiness> {
    const watch = this.record.watch;
    return awaitReadiness({
      baseUrl: this.baseUrl,
      servedModelName: servedModelName(this.spec),
      watch: asleep ? { ...watch, healthPath: ASLEEP_PROBE_PATH } : watch,
      settleMs,
      timeoutMs,
      signal,
      portOwner: this.portOwner,
      // A process not the engine's holds the port while it starts: status and log say who, until it is gone.
      onWaiting: (squatter) => {
        const before = this.life;
        const next = this.apply({ kind: 'squatted', squatter });
        if ('refused' in next || next.life === before) return;
        if (squatter) this.ctx.log.warn({ shard: this.shardId, replica: this.replicaId, pid: this.pid, why: squatter }, 'shard not ready: its port is not the engine\'s');
        // The control plane hears it too: a replica stuck STARTING for a reason an operator can act on.
        this.ctx.onStatus(this.snapshot());
      },
    });
  }

  /**
   * The health watch of a serving rank: /health, and stall detection when
   * the engine names its metrics. UNHEALTHY is reported, not acted on:
   * killing here would race the control plane, which owns the decision to
   * replace an engine (a stalled one included).
   */
  private watchHealth(): void {
    if (!this.baseUrl || this.lifeScope.signal.aborted || this.healthWatched) return;
    this.healthWatched = true;
    const { healthIntervalMs: intervalMs, stallTimeoutMs } = this.ctx.config;
    const { healthPath, probeTimeoutMs, runningGauges, progressCounters, inFlightGauges } = this.record.watch;
    const sleepApi = this.hands.sleepApi;
    watchHealth({
      ...{ baseUrl: this.baseUrl, intervalMs, healthPath, probeTimeoutMs, signal: this.serving.signal, portOwner: this.portOwner },
      stall: { runningGauges, progressCounters, stallTimeoutMs, inFlightGauges },
      onVerdict: (v) => this.applyProbe(v),
      // SGLang's /health generates: held while asleep (EngineSleepApi.hold), it would time out and flap the shard on waking.
      paused: () => this.life.state === S.SLEEPING && sleepApi?.healthNeedsModel === true,
      // A sleep-mode engine's /sleep takes no key: one the agent did not ask for makes the shard UNHEALTHY (S6).
      sleepGauge: this.spec.profile?.sleepMode ? sleepApi?.awakeGauge : undefined, sleeping: () => this.life.state === S.SLEEPING,
      onLoad: (load) => {
        if (!this.serving.signal.aborted) this.load = load;
      },
    });
    this.apply({ kind: 'watched' });
  }

  /** One of the shard's GPUs has a fault; the engine is not touched. */
  markGpuFault(reason: string): void { this.apply({ kind: 'gpu-fault', reason }); }
  /** The shard's GPUs are sound again: back to READY, unless the health probe says otherwise. */
  clearGpuFault(): void { this.apply({ kind: 'gpu-sound' }); }
  /** A peer rank broke or stalled (undefined: the gang is whole again); a change the state does not show is reported all the same. */
  markGang(fault: GangFault | undefined): void {
    const before = this.life;
    const next = this.apply(fault ? { kind: 'gang-fault', fault } : { kind: 'gang-whole' });
    if (!('refused' in next) && next.life !== before && next.life.state === before.state) this.ctx.onStatus(this.snapshot());
  }

  private applyProbe(v: HealthVerdict): void {
    // Said also when no transition follows (a faulted GPU already made it UNHEALTHY): why it stays so.
    this.ctx.log.debug({ shard: this.shardId, replica: this.replicaId, healthy: v.healthy, why: v.why }, 'health probe verdict');
    this.apply({ kind: 'probe', verdict: v });
    // Awake again after a sleep it was not asked: its known answer decides (ShardAnswers).
    if (v.healthy && this.life.sleptUnasked && this.life.state === S.UNHEALTHY) this.answers.recheckAfterUnaskedSleep(v, this.serving.signal);
  }

  /** What ends everything of this engine: its unit's cgroup, or its process group. */
  fence(): EngineFence {
    return this.engine.fence();
  }

  /** Terminates the whole process group (SIGTERM, `graceMs`, SIGKILL); concurrent calls share one stop. */
  stop(opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    this.stopping ??= this.doStop(opts).finally(() => (this.stopping = undefined));
    return this.stopping;
  }

  private async doStop(opts: { graceMs?: number; signal?: AbortSignal }): Promise<ShardSnapshot> {
    // An engine that died on its own before the stop: FAILED with its peer named (issue 47 item 3), never STOPPED.
    if (this.life.dead) await this.dying;
    const asked = opts.graceMs ?? this.ctx.config.stopGraceMs;
    const asleep = this.life.state === S.SLEEPING;
    const graceMs = asleep ? Math.min(asked, ASLEEP_STOP_GRACE_MS) : asked;
    const why = asleep ? `stop requested while asleep: nothing to drain (grace ${formatDuration(graceMs)})` : `stop requested (grace ${formatDuration(graceMs)})`;
    this.apply({ kind: 'stop', why });
    this.serving.abort();
    const log = this.ctx.log.child({ shard: this.shardId, pid: this.pid });
    const stopped = await stopShardEngine(this.engine, { graceMs, signal: opts.signal, log, deathSeen: () => this.life.dead });
    // Gone either way: terminated, or its pid names another process now.
    this.apply({ kind: 'exited', atMs: Date.now(), ...(stopped.exit ? { exit: stopped.exit } : {}) });
    this.detach('stopped');
    // Gone from disk before STOPPED is announced: nothing of the shard is left, here or after a restart.
    await this.stateFile.remove();
    this.apply({ kind: 'stopped', why: stopped.why });
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
    const next = this.apply({ kind: 'drain' });
    if ('refused' in next) throw failure(`shard ${this.shardId} ${next.refused}`);
    await this.stateFile.recordDrain(true);
    return this.snapshot();
  }

  /**
   * Undoes a drain: DRAINING → READY (reported, so the control plane routes
   * to it again), then UNHEALTHY at once if the health watch found the
   * engine bad while it drained. Throws for a shard that is not DRAINING.
   */
  async cancelDrain(): Promise<ShardSnapshot> {
    const next = this.apply({ kind: 'cancel-drain' });
    if ('refused' in next) throw failure(`shard ${this.shardId} ${next.refused}`);
    this.applyProbe(this.life.health.verdict);
    await this.stateFile.recordDrain(false);
    return this.snapshot();
  }

  /** READY → SLEEPING, reported before the engine is asked (shard-sleep-steps.ts); refused in one line, or undone. */
  async sleep(level: number, probes: SleepProbes): Promise<ShardSnapshot> {
    if (!this.servesHttp) throw failure(`sleep refused: rank ${this.spec.rank} of shard ${this.shardId} serves no API; sleep its replica's rank 0`);
    await this.oneSleepCall('sleep', (hands) => sleepShard(hands, level, probes));
    return this.snapshot();
  }

  /** SLEEPING → READY once it answers, holds its memory and gives its known answer; a failed wake leaves it SLEEPING with the reason. */
  async wake(probes: SleepProbes): Promise<ShardSnapshot> {
    const may = nextShard(this.life, { kind: 'wake' });
    if ('refused' in may) throw failure(`wake refused: shard ${this.shardId} ${may.refused}`);
    await this.oneSleepCall('wake', (hands) => wakeShard(hands, probes));
    return this.snapshot();
  }

  private async oneSleepCall(what: 'sleep' | 'wake', run: (hands: SleepHands) => Promise<void>): Promise<void> {
    if (!this.baseUrl || this.sleepBusy) throw failure(`${what} refused: shard ${this.shardId} is already being put to sleep or woken`);
    this.sleepBusy = true;
    await run({ ...this.hands, answers: this.answers }).finally(() => (this.sleepBusy = false));
  }

  /** Requests the engine holds, running and waiting, from the engine's own gauges; undefined when it cannot tell. */
  async inFlight(): Promise<number | undefined> {
    if (!this.baseUrl || this.record.watch.inFlightGauges.length === 0) return undefined;
    return readInFlight(this.baseUrl, this.record.watch.inFlightGauges, this.lifeScope.signal, this.portOwner);
  }

  /**
   * Every watch and wait of this runner ends; no process is touched. `why` says whose act it is, so that a readiness
   * wait cut short tells its caller the truth: the agent going away (then no state file change starts after, and this
   * resolves once the last one has ended), this runner replaced by a relaunch under the same id, or the shard stopped
   * (its group is gone). The first reason holds.
   */
  detach(why: DetachReason): Promise<void> {
    this.detachedBy ??= why;
    if (!this.lifeScope.signal.aborted) this.lifeScope.abort(failure(detachMessage(this.shardId, why)));
    return why === 'agent-closing' ? this.stateFile.close() : Promise.resolve();
  }
}
