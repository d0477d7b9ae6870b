import type { ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { stat } from 'node:fs/promises';
import type { Launcher, SupervisorConfig } from '../config/agent-config.js';
import { servedModelName } from '../engines/shard-launch.js';
import { ShardState, type StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../lib/duration.js';
import { errorMessage, failure } from '../../lib/errors.js';
import { writeFailureRecord } from '../../lib/files/failure-record.js';
import { removeStateFile, updateStateFile } from '../../lib/files/state-file.js';
import { tailFile } from '../../lib/files/tail-file.js';
import type { Logger } from '../../lib/logger.js';
import type { ProcessIdentity } from '../../lib/process/process-identity.js';
import { shardFailurePath } from '../../lib/shard-layout.js';
import { isTerminal } from '../../lib/shard-states.js';
import { type DeathInfo, watchDeath } from './death-watch.js';
import { type EngineGroup, groupStillOurs, reapLeftovers } from './engine-group.js';
import type { EngineUnit } from './engine-unit.js';
import { endUnitLeftovers } from './stop-engine-unit.js';
import { type EngineFence, endEngine } from './end-engine.js';
import type { LauncherChoice } from './choose-launcher.js';
import { type HealthVerdict, watchHealth } from './health-watch.js';
import { PROBE_TIMEOUT_MS, httpGet } from './http-probe.js';
import { readGauge } from './read-gauge.js';
import { waitStaysAlive, waitUntilServing } from './readiness-wait.js';
import { ShardFailedError } from './shard-failed-error.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
import { isTransitionAllowed, stateName } from './shard-transitions.js';

const S = ShardState;

/** SIGTERM to SIGKILL for what survives a dead engine leader: its work is lost already. */
export const LEFTOVER_GRACE_MS = 2000;
/** Log lines kept in lastOutput when a shard fails or exits. */
export const LAST_OUTPUT_LINES = 20;

/** What every runner of one supervisor shares. */
export interface ShardRunnerContext {
  config: SupervisorConfig;
  log: Logger;
  /** Hears every transition of the shard, after it is made and logged. */
  onTransition: (t: ShardTransition) => void;
  /** The launcher new engines get (config.launcher with auto decided); config.launcher decided here when absent. */
  launcher?: () => Promise<LauncherChoice>;
}

/** One engine as launched or found: what the runner needs to watch, settle and stop it. */
export interface RunnerEngine {
  spec: StartShard;
  replicaId: string;
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** Our own child: its exit event tells us at once, with the status. Absent for an adopted engine. */
  child?: ChildProcess;
  /** How it was launched; direct when not said (state files of version one). */
  launcher?: Launcher;
  /** Its systemd unit (systemd-run): its cgroup is what a stop ends, and systemd records its exit status. */
  unit?: EngineUnit;
  adopted: boolean;
  servesHttp: boolean;
  /** The engine's Prometheus gauge of running requests ('' when it has none), read while draining. */
  inFlightMetric: string;
  /** The engine's generation-token counter ('' when it has none): with inFlightMetric, what stall detection reads. */
  generationTokensMetric?: string;
  /** A drain recorded in the state file by a previous agent: the shard settles to DRAINING, not READY. */
  drainRequested?: boolean;
  startedAtMs: number;
  logPath: string;
  statePath: string;
}

/** A profile without startup_timeout gets this long to load (large models take minutes). */
/** How long a stop waits for Node to reap its own child after the group is gone, for its exit status. */
const CHILD_REAP_WAIT_MS = 2000;

export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

export interface SettleOptions {
  /** How long an HTTP rank may take to serve its model; default DEFAULT_STARTUP_TIMEOUT_MS (10 min). */
  timeoutMs?: number;
  /** How long a worker rank must stay alive; default config.workerSettleMs. */
  settleMs?: number;
  signal?: AbortSignal;
}

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
  private readonly identity: ProcessIdentity;
  private readonly child: ChildProcess | undefined;
  private readonly launcher: Launcher;
  private readonly unit: EngineUnit | undefined;
  private readonly inFlightMetric: string;
  private readonly generationTokensMetric: string;
  /** Drained, by this agent or (from the state file) a previous one; cleared by cancelDrain(). */
  private drainRequested: boolean;
  /** Drain and cancel rewrite the state file one at a time, so the last request is the one on disk. */
  private persisting: Promise<void> = Promise.resolve();
  private healthWatched = false;
  /** The latest verdict of the health watch; a DRAINING shard keeps it for when its drain is cancelled. */
  private health: HealthVerdict = { healthy: true, cause: undefined, why: 'answers /health' };
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
  /** A fault of one of the shard's GPUs ("GPU 3: Xid 79: ..."), '' when they are sound. */
  private gpuFault = '';
  /** The health probe's last verdict: a cleared GPU fault returns the shard to READY only if it answers. */
  private probeHealthy = true;

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
    this.identity = engine.identity;
    this.child = engine.child;
    this.launcher = engine.launcher ?? 'direct';
    this.unit = engine.unit;
    this.adopted = engine.adopted;
    this.servesHttp = engine.servesHttp;
    this.inFlightMetric = engine.inFlightMetric;
    this.generationTokensMetric = engine.generationTokensMetric ?? '';
    this.drainRequested = engine.drainRequested ?? false;
    this.startedAtMs = engine.startedAtMs;
    this.logPath = engine.logPath;
    this.statePath = engine.statePath;
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
    watchDeath({
      child: this.child,
      pid: this.pid,
      identity: this.identity,
      unit: this.unit,
      signal: this.life.signal,
      onDeath: (info) => void this.onDeath(info),
    });
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
      unit: this.unit?.name ?? '',
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
    if (!this.baseUrl) {
      const settleMs = opts.settleMs ?? this.ctx.config.workerSettleMs;
      await waitStaysAlive(settleMs, wake);
      this.throwUnlessStarting(opts.signal);
      this.becomeReady(`stayed alive ${formatDuration(settleMs)}`);
      return;
    }
    const timeoutMs = opts.timeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS;
    const outcome = await waitUntilServing({ baseUrl: this.baseUrl, servedModelName: this.servedModelName, timeoutMs, signal: wake });
    this.throwUnlessStarting(opts.signal);
    if (outcome.ready) {
      this.becomeReady(`answers /health and lists ${JSON.stringify(this.servedModelName)}`);
      return;
    }
    const message = `not ready after ${formatDuration(timeoutMs)}: ${outcome.reason}`;
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
    // A fault raised while the engine was loading (STARTING cannot become
    // UNHEALTHY): UNHEALTHY at once, so no traffic stays on a failing GPU.
    if (this.gpuFault !== '') this.becomeUnhealthyForGpu();
  }

  /**
   * One of the shard's GPUs has a fault: a READY shard becomes UNHEALTHY with
   * the fault as its error, and stays so while the fault lasts. The engine is
   * not touched: the control plane decides whether to replace it.
   */
  markGpuFault(reason: string): void {
    if (reason === '' || reason === this.gpuFault) return;
    this.gpuFault = reason;
    if (this.state === S.READY) this.becomeUnhealthyForGpu();
    else if (this.state === S.UNHEALTHY || this.state === S.DRAINING) this.error = reason;
  }

  /** The shard's GPUs are sound again: back to READY, unless the health probe says otherwise. */
  clearGpuFault(): void {
    if (this.gpuFault === '') return;
    const was = this.gpuFault;
    this.gpuFault = '';
    if (this.error === was) this.error = '';
    if (this.state === S.UNHEALTHY && this.probeHealthy) this.transition(S.READY, `GPU fault cleared (${was})`);
  }

  private becomeUnhealthyForGpu(): void {
    this.error = this.gpuFault;
    this.transition(S.UNHEALTHY, this.gpuFault);
  }

  /** Makes the state agree with the verdict; every tick calls it, so only a disagreement changes anything. */
  private applyHealth(v: HealthVerdict): void {
    this.health = v;
    this.probeHealthy = v.healthy;
    // Said also when no transition follows (a faulted GPU already made it UNHEALTHY): why it stays so.
    this.ctx.log.debug({ shard: this.shardId, replica: this.replicaId, healthy: v.healthy, why: v.why }, 'health probe verdict');
    if (!v.healthy && this.state === S.READY) {
      this.error = v.why;
      this.transition(S.UNHEALTHY, v.why);
    } else if (!v.healthy && this.state === S.UNHEALTHY) {
      // Still unhealthy, maybe for another cause now: status shows the latest, without a new report each tick.
      // A GPU fault stays the cause while it lasts.
      if (this.gpuFault === '') this.error = v.why;
    } else if (v.healthy && this.state === S.UNHEALTHY && this.gpuFault === '') {
      // An engine answering again on a faulted GPU stays UNHEALTHY: the GPU, not the engine, is the cause.
      this.error = '';
      this.transition(S.READY, v.why);
    }
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
      this.exitCode = info.code ?? (info.signal ? 128 + (osConstants.signals[info.signal] ?? 0) : null);
    }
    const recorded = info.known && info.recordedBy ? ` (recorded by ${info.recordedBy})` : '';
    const how = info.known
      ? info.signal
        ? `was killed by ${info.signal}${recorded}`
        : `exited with code ${info.code}${recorded}`
      : `is gone (${info.reason}; not a child of this agent, so its exit status is unknown)`;
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

  /**
   * The failure record beside the log, written before FAILED is reported so
   * that whoever hears FAILED (and restarts the shard, which moves both to
   * previous-runs/) finds it. A failure to write is logged: the report
   * carries the same facts.
   */
  private async recordFailure(): Promise<void> {
    const path = shardFailurePath(this.ctx.config.logDir, this.shardId);
    try {
      // The log's group (admin.group, set by prepareLogFile): whoever may read the log may read how it ended.
      const gid = (await stat(this.logPath).catch(() => undefined))?.gid;
      await writeFailureRecord(path, {
        shardId: this.shardId,
        replicaId: this.replicaId,
        pid: this.pid,
        exitCode: this.exitCode,
        signal: this.signal,
        error: this.error,
        at: new Date().toISOString(),
        startedAt: new Date(this.startedAtMs).toISOString(),
        lastOutput: this.lastOutput,
      }, gid);
    } catch (err) {
      this.ctx.log.warn({ shard: this.shardId, file: path, err: errorMessage(err) }, 'could not write the failure record');
    }
  }

  private async reapLeftovers(): Promise<void> {
    const graceMs = Math.min(LEFTOVER_GRACE_MS, this.ctx.config.stopGraceMs);
    if (this.unit) {
      // The unit's cgroup holds whatever the engine left, in or out of its group.
      try {
        await endUnitLeftovers(this.unit, { graceMs, signal: this.life.signal });
      } catch (err) {
        this.ctx.log.warn({ shard: this.shardId, unit: this.unit.name, err: errorMessage(err) }, "ending the rest of a dead engine's unit failed");
      }
      return;
    }
    await reapLeftovers(this.group(), { graceMs, signal: this.life.signal, log: this.ctx.log.child({ shard: this.shardId, replica: this.replicaId }) });
  }

  private async lastLines(): Promise<string[]> {
    return tailFile(this.logPath, LAST_OUTPUT_LINES).catch(() => []);
  }

  /** Whether signalling the shard's process group still reaches the engine it names (see groupStillOurs). */
  groupStillOurs(): boolean {
    return groupStillOurs(this.group());
  }

  private group(): EngineGroup {
    return { pid: this.pid, pgid: this.pgid, identity: this.identity, child: this.child };
  }

  /** What ends everything of this engine: its unit's cgroup, or its process group. */
  fence(): EngineFence {
    return { pgid: this.pgid, unit: this.unit, stillOurs: () => this.groupStillOurs() };
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
    const outcome = await endEngine(this.fence(), { graceMs, signal: opts.signal });
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
    if (this.state === S.STOPPING) this.transition(S.STOPPED, this.unit ? `unit ${this.unit.name}: cgroup ${outcome}` : `process group ${outcome}`);
    return this.snapshot();
  }

  /** Resolves once our own child's exit was seen (recording its status), or after `ms`; at once for an adopted engine. */
  private async childExited(ms: number): Promise<void> {
    const child = this.child;
    if (!child || this.dead) return;
    if (child.exitCode === null && child.signalCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          child?.off('exit', done);
          resolve();
        }
        child.once('exit', done);
      });
    }
    if (!this.dead && (child.exitCode !== null || child.signalCode !== null)) {
      this.signal = child.signalCode;
      this.exitCode = child.exitCode ?? (child.signalCode ? 128 + (osConstants.signals[child.signalCode] ?? 0) : null);
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
    this.applyHealth(this.health);
    await this.persistDrain(false);
    return this.snapshot();
  }

  /**
   * Records the drain in the state file. A failure is logged, not thrown:
   * the drain holds in memory (refusing it would keep traffic on an engine
   * an operator is taking away); only an agent restart would forget it.
   */
  private persistDrain(drainRequested: boolean): Promise<void> {
    this.persisting = this.persisting.then(async () => {
      try {
        await updateStateFile(this.statePath, this.shardId, { drainRequested });
      } catch (err) {
        this.ctx.log.warn(
          { shard: this.shardId, file: this.statePath, err: errorMessage(err) },
          drainRequested
            ? 'shard is DRAINING but the drain could not be recorded; an agent restart would bring it back READY'
            : 'drain cancelled but the state file still records it; an agent restart would bring it back DRAINING',
        );
      }
    });
    return this.persisting;
  }

  /** Requests the engine is working on, from the engine's own gauge; undefined when it cannot tell. */
  async inFlight(): Promise<number | undefined> {
    if (!this.baseUrl || this.inFlightMetric === '') return undefined;
    try {
      const r = await httpGet(`${this.baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal: this.life.signal });
      return r.status === 200 ? readGauge(r.body, this.inFlightMetric) : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Removes the state file of an engine that is gone. Failing to is logged,
   * not thrown: the engine is stopped whatever the disk says, and a stale
   * file names a process that no longer matches its identity, which the next
   * agent start judges dead and cleans. Throwing here once turned a
   * successful stop on a read-only state directory into "stop failed" after
   * STOPPED had been reported (found by the fault campaign).
   */
  async forgetStateFile(): Promise<void> {
    // A drain being recorded would otherwise write the file back after it is gone.
    await this.persisting;
    try {
      await removeStateFile(this.statePath);
    } catch (err) {
      this.ctx.log.warn({ shard: this.shardId, file: this.statePath, err: errorMessage(err) }, 'engine is gone but its state file could not be removed');
    }
  }

  /** The agent going away, or this runner replaced: every watch and wait ends; no process is touched. */
  detach(): void {
    this.life.abort(failure('the supervisor is closed'));
  }
}
