import type { Launcher } from '../config/agent-config.js';
import { servedModelName } from '../engines/shard-launch.js';
import { ShardState, type StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../lib/duration.js';
import { errorMessage, failure } from '../../lib/errors.js';
import { tailFile } from '../../lib/files/tail-file.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { DeathInfo } from './death-watch.js';
import type { EngineFence } from './end-engine.js';
import { EngineProcess } from './engine-process.js';
import { awaitReadiness } from './await-readiness.js';
import { describeDeath, exitCodeOf } from './exit-status.js';
import { type HealthVerdict, watchHealth } from './health-watch.js';
import { readInFlight } from './read-in-flight.js';
import { recordShardFailure } from './record-shard-failure.js';
import type { RunnerEngine } from './runner-engine.js';
import { DEFAULT_STARTUP_TIMEOUT_MS, type SettleOptions } from './settle-options.js';
import { ShardFailedError } from './shard-failed-error.js';
import { type HealthChange, ShardHealth } from './shard-health.js';
import type { ShardRunnerContext } from './shard-runner-context.js';
import type { ShardSnapshot } from './shard-snapshot.js';
import { isTransitionAllowed, stateName } from './shard-transitions.js';
import { StateFileWriter } from './state-file-writer.js';

// Where they were first defined: callers import them from here.
export type { RunnerEngine } from './runner-engine.js';
export type { ShardRunnerContext } from './shard-runner-context.js';
export { DEFAULT_STARTUP_TIMEOUT_MS, type SettleOptions } from './settle-options.js';

const S = ShardState;

/** SIGTERM to SIGKILL for what survives a dead engine leader: its work is lost already. */
export const LEFTOVER_GRACE_MS = 2000;
/** Log lines kept in lastOutput when a shard fails or exits. */
export const LAST_OUTPUT_LINES = 20;

/** How long a stop waits for Node to reap its own child after the group is gone, for its exit status. */
const CHILD_REAP_WAIT_MS = 2000;


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
  readonly shardId: string;
  readonly replicaId: string;
  readonly spec: StartShard;
  readonly pid: number;
  readonly pgid: number;
  readonly adopted: boolean;
  readonly servesHttp: boolean;
  readonly logPath: string;
  readonly statePath: string;
  readonly startedAtMs: number;
  private state: ShardState;
  private error = '';
  private exitCode: number | null = null;
  private signal: NodeJS.Signals | null = null;
  private lastOutput: string[] = [];
  /** The engine process is gone (its group may not be). */
  private dead = false;
  private readonly engine: EngineProcess;
  private readonly launcher: Launcher;
  private readonly inFlightMetric: string;
  private readonly generationTokensMetric: string;
  /** Drained, by this agent or (from the state file) a previous one; cleared by cancelDrain(). */
  private drainRequested: boolean;
  private readonly stateFile: StateFileWriter;
  private healthWatched = false;
  private readonly health = new ShardHealth();
  /** Where the rank serves, derived once: nothing above the runner builds it again. */
  private readonly baseUrl: string | undefined;
  private readonly servedModelName: string;
  /** detach(): ends every wait, probe and watch of this shard; touches no process. */
  private readonly life = new AbortController();
  /** Aborted when the shard leaves STARTING, so a readiness wait wakes at once. */
  private readonly leftStarting = new AbortController();
  /** Aborted when the health watch must end: stop begun, engine dead, or detach. */
  private readonly serving = new AbortController();
  private stopping: Promise<ShardSnapshot> | undefined;
  constructor(
    private readonly ctx: ShardRunnerContext,
    engine: RunnerEngine,
    /** The state of the runner this one replaces (a relaunch), so the first transition is checked from it. */
    previousState: ShardState = S.UNSPECIFIED,
  ) {
    this.shardId = engine.spec.shardId;
    this.replicaId = engine.replicaId;
    this.spec = engine.spec;
    this.pid = engine.pid;
    this.pgid = engine.pgid;
    this.engine = new EngineProcess({ pid: engine.pid, pgid: engine.pgid, identity: engine.identity, child: engine.child }, engine.unit);
    this.launcher = engine.launcher ?? 'direct';
    this.adopted = engine.adopted;
    this.servesHttp = engine.servesHttp;
    this.inFlightMetric = engine.inFlightMetric;
    this.generationTokensMetric = engine.generationTokensMetric ?? '';
    this.drainRequested = engine.drainRequested ?? false;
    this.startedAtMs = engine.startedAtMs;
    this.logPath = engine.logPath;
    this.statePath = engine.statePath;
    this.stateFile = new StateFileWriter(engine.statePath, engine.spec.shardId, ctx.log);
    this.state = previousState;
    this.baseUrl = engine.servesHttp && engine.spec.httpPort > 0 ? `http://127.0.0.1:${engine.spec.httpPort}` : undefined;
    this.servedModelName = servedModelName(engine.spec);
    this.life.signal.addEventListener('abort', () => this.serving.abort(), { once: true });
  }

  /** Whether the engine's leader may still run. */
  get running(): boolean {
    return !this.dead;
  }

  get currentState(): ShardState {
    return this.state;
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
      launcher: this.launcher,
      unit: this.engine.unit?.name ?? '',
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
      this.ctx.onTransition({ shard: this.snapshot(), from, to });
    } catch (err) {
      // A listener's bug must not leave the shard half-way through a change
      // (an exit handled, a timer not cleared).
      this.ctx.log.error({ shard: this.shardId, err: errorMessage(err) }, 'a transition listener threw');
    }
  }

  // ---------------------------------------------------------------- readiness

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
    if (!this.enterWait()) return;
    const wake = AbortSignal.any([this.life.signal, this.leftStarting.signal, ...(opts.signal ? [opts.signal] : [])]);
    const outcome = await awaitReadiness({
      baseUrl: this.baseUrl,
      servedModelName: this.servedModelName,
      settleMs: opts.settleMs ?? this.ctx.config.workerSettleMs,
      timeoutMs: opts.timeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS,
      signal: wake,
    });
    this.throwUnlessStarting(opts.signal);
    if (outcome.ready) {
      this.becomeReady(outcome.why);
      return;
    }
    const message = outcome.message;
    this.error = message;
    this.lastOutput = await this.lastLines();
    if (this.state === S.STARTING) this.transition(S.FAILED, message);
    throw this.failedError();
  }

  private becomeReady(why: string): void {
    // A drain that survived the agent: READY first would tell the control
    // plane to send traffic back to an engine an operator is emptying.
    if (this.drainRequested) this.transition(S.DRAINING, `${why}; drained before the agent restarted`);
    else this.transition(S.READY, why);
    this.watchHealth();
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
    watchHealth({
      baseUrl: this.baseUrl,
      intervalMs: this.ctx.config.healthIntervalMs,
      signal: this.serving.signal,
      stall: {
        requestsRunningMetric: this.inFlightMetric,
        generationTokensMetric: this.generationTokensMetric,
        stallTimeoutMs: this.ctx.config.stallTimeoutMs,
      },
      onVerdict: (v) => this.applyHealth(v),
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
    this.apply(this.health.judge(v, this.state));
  }

  /** Carries out what the health judgement decided, through the one transition function. */
  private apply(change: HealthChange | undefined): void {
    if (change?.error !== undefined) this.error = change.error;
    if (change?.to !== undefined) this.transition(change.to, change.why);
  }

  /** False when already past STARTING and serving (nothing to wait for); throws when it cannot become ready. */
  private enterWait(): boolean {
    if (this.state === S.STARTING) return true;
    if (this.state === S.READY || this.state === S.UNHEALTHY || this.state === S.DRAINING) return false;
    if (this.state === S.STOPPING) throw failure(`shard ${this.shardId} is being stopped`);
    throw this.failedError();
  }

  private throwUnlessStarting(signal?: AbortSignal): void {
    signal?.throwIfAborted();
    // stop() detaches too once the group is gone: that is a stop, not the agent going away.
    if (this.state === S.STOPPING || this.state === S.STOPPED) throw failure(`shard ${this.shardId} was stopped while starting`);
    if (this.life.signal.aborted) throw failure('the supervisor is closed');
    if (this.state === S.STARTING) return;
    throw this.failedError();
  }

  private failedError(): ShardFailedError {
    return new ShardFailedError(this.shardId, `shard ${this.shardId}: ${this.error || stateName(this.state)}`, {
      exitCode: this.exitCode,
      signal: this.signal,
      lastOutput: this.lastOutput,
    });
  }

  // ---------------------------------------------------------------- death

  private async onDeath(info: DeathInfo): Promise<void> {
    if (this.dead || this.life.signal.aborted) return;
    this.dead = true;
    this.serving.abort();
    if (info.known) {
      this.signal = info.signal;
      this.exitCode = exitCodeOf(info.code, info.signal);
    }
    const how = describeDeath(info);
    // Read before the state changes, so the report carries the engine's own last words.
    const lastOutput = await this.lastLines();
    if (this.life.signal.aborted) return;
    if (this.state !== S.STOPPING && !isTerminal(this.state)) await this.reapLeftovers();
    if (this.life.signal.aborted) return;
    if (this.state === S.STARTING) {
      this.error = `engine ${how} while starting`;
      this.lastOutput = lastOutput;
      await this.recordFailure();
      // The record took a moment: a stop may have begun meanwhile.
      if (this.life.signal.aborted || this.currentState !== S.STARTING) return;
      this.transition(S.FAILED, this.error);
    } else if (this.state === S.READY || this.state === S.UNHEALTHY || this.state === S.DRAINING) {
      this.error = `engine ${how}`;
      this.lastOutput = lastOutput;
      const clean = info.known && info.code === 0;
      if (!clean) await this.recordFailure();
      if (this.life.signal.aborted || this.currentState === S.STOPPING || isTerminal(this.currentState)) return;
      this.transition(clean ? S.EXITED : S.FAILED, this.error);
    }
    // STOPPING: stop() reports it. Terminal: already reported.
  }

  private recordFailure(): Promise<void> {
    return recordShardFailure({ logDir: this.ctx.config.logDir, logPath: this.logPath, log: this.ctx.log }, {
      shardId: this.shardId,
      replicaId: this.replicaId,
      pid: this.pid,
      exitCode: this.exitCode,
      signal: this.signal,
      error: this.error,
      at: new Date().toISOString(),
      startedAt: new Date(this.startedAtMs).toISOString(),
      lastOutput: this.lastOutput,
    });
  }

  private async reapLeftovers(): Promise<void> {
    const graceMs = Math.min(LEFTOVER_GRACE_MS, this.ctx.config.stopGraceMs);
    await this.engine.reapLeftovers({ graceMs, signal: this.life.signal, log: this.ctx.log.child({ shard: this.shardId, replica: this.replicaId }) });
  }

  private async lastLines(): Promise<string[]> {
    return tailFile(this.logPath, LAST_OUTPUT_LINES).catch(() => []);
  }

  /** Whether signalling the shard's process group still reaches the engine it names (see groupStillOurs). */
  groupStillOurs(): boolean {
    return this.engine.stillOurs();
  }

  /** What ends everything of this engine: its unit's cgroup, or its process group. */
  fence(): EngineFence {
    return this.engine.fence();
  }

  // ---------------------------------------------------------------- stop, drain

  /** Terminates the whole process group (SIGTERM, `graceMs`, SIGKILL); concurrent calls share one stop. */
  stop(opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    this.stopping ??= this.doStop(opts).finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  private async doStop(opts: { graceMs?: number; signal?: AbortSignal }): Promise<ShardSnapshot> {
    const graceMs = opts.graceMs ?? this.ctx.config.stopGraceMs;
    if (this.state !== S.STOPPING && !isTerminal(this.state)) this.transition(S.STOPPING, `stop requested (grace ${formatDuration(graceMs)})`);
    this.serving.abort();
    const outcome = await this.engine.end({ graceMs, signal: opts.signal });
    if (outcome === 'not-ours') {
      this.ctx.log.warn({ shard: this.shardId, pid: this.pid }, 'engine pid now names another process; nothing was signalled');
    }
    // A leader that is a zombie reads as gone before Node has reaped it: wait
    // (briefly) for the exit event, or a clean SIGTERM exit would be recorded
    // with no status at all.
    await this.childExited(CHILD_REAP_WAIT_MS);
    // Gone either way: terminated, or its pid names another process now.
    this.dead = true;
    this.detach();
    // Gone from disk before STOPPED is announced: whoever hears STOPPED may
    // rely on nothing of the shard being left, here or after a restart.
    await this.forgetStateFile();
    if (this.state === S.STOPPING) this.transition(S.STOPPED, this.engine.unit ? `unit ${this.engine.unit.name}: cgroup ${outcome}` : `process group ${outcome}`);
    return this.snapshot();
  }

  /** Resolves once our own child's exit was seen (recording its status), or after `ms`; at once for an adopted engine. */
  private async childExited(ms: number): Promise<void> {
    if (this.dead) return;
    const status = await this.engine.childExit(ms);
    if (status && !this.dead) {
      this.signal = status.signal;
      this.exitCode = exitCodeOf(status.code, status.signal);
    }
  }

  /**
   * READY or UNHEALTHY → DRAINING (the control plane routes elsewhere); a
   * repeat is a no-op. The drain is recorded in the state file before this
   * resolves, so an agent restart (kill -9 included) brings the shard back
   * DRAINING: it once came back READY, and traffic returned to an engine
   * being emptied for maintenance.
   */
  async drain(): Promise<ShardSnapshot> {
    if (this.state === S.READY || this.state === S.UNHEALTHY) {
      this.drainRequested = true;
      this.transition(S.DRAINING, 'drain requested');
    } else if (this.state !== S.DRAINING) {
      throw failure(`shard ${this.shardId} is ${stateName(this.state)}: only a READY or UNHEALTHY shard can be drained`);
    }
    await this.persistDrain(true);
    return this.snapshot();
  }

  /**
   * Undoes a drain: DRAINING → READY (reported, so the control plane routes
   * to it again), then UNHEALTHY at once if the health watch found the
   * engine bad while it drained. Throws for a shard that is not DRAINING.
   */
  async cancelDrain(): Promise<ShardSnapshot> {
    if (this.state !== S.DRAINING) {
      throw failure(`shard ${this.shardId} is ${stateName(this.state)}: only a DRAINING shard can have its drain cancelled`);
    }
    this.drainRequested = false;
    this.error = '';
    this.transition(S.READY, 'drain cancelled');
    this.applyHealth(this.health.lastVerdict);
    await this.persistDrain(false);
    return this.snapshot();
  }

  private persistDrain(drainRequested: boolean): Promise<void> {
    return this.stateFile.recordDrain(drainRequested);
  }

  /** Requests the engine is working on, from the engine's own gauge; undefined when it cannot tell. */
  async inFlight(): Promise<number | undefined> {
    if (!this.baseUrl || this.inFlightMetric === '') return undefined;
    return readInFlight(this.baseUrl, this.inFlightMetric, this.life.signal);
  }

  /** Removes the state file of an engine that is gone (StateFileWriter.remove); never throws. */
  forgetStateFile(): Promise<void> {
    return this.stateFile.remove();
  }

  /** The agent going away, or this runner replaced: every watch and wait ends; no process is touched. */
  detach(): void {
    this.life.abort(failure('the supervisor is closed'));
  }
}
