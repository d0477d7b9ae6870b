import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { chmodSync, mkdirSync, readdirSync, unlinkSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SupervisorConfig } from '../config/agent-config.js';
import { ShardState, type StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../lib/duration.js';
import { errnoCode, errorMessage, failure, usageError } from '../../lib/errors.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { assertShardId, isValidShardId } from '../../lib/shard-id.js';
import { PROBE_TIMEOUT_MS, httpGet, probeHealth, probeReady } from './http-probe.js';
import { followFile } from './follow-file.js';
import { defaultInFlightMetric } from './in-flight-metric.js';
import { checkLaunchPlan } from './check-launch-plan.js';
import { engineEnv, launchEngine } from './launch-engine.js';
import type { LaunchPlan } from './launch-plan.js';
import type { Orphan } from './orphan.js';
import { type ProcessIdentity, checkIdentity, readBootId, readProcStat } from './process-identity.js';
import { findProcessesLoggingTo, findProcessesLoggingUnder, listProcessGroup } from './process-table.js';
import { readGauge } from './read-gauge.js';
import { LOG_CHECK_INTERVAL_MS, rotateLogIfNeeded } from './rotate-log.js';
import { ShardFailedError } from './shard-failed-error.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
import { isTerminal, isTransitionAllowed, stateName } from './shard-transitions.js';
import {
  STATE_SCHEMA_VERSION,
  readStateFile,
  readStateFileSync,
  removeStateFile,
  stateFilePath,
  writeStateFile,
} from './state-file.js';
import { tailFile } from './tail-file.js';
import { terminateProcessGroup } from './terminate-process-group.js';

// The contract's types, importable from here as well as from their own files.
export type { LaunchPlan } from './launch-plan.js';
export type { Orphan } from './orphan.js';
export type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
export { ShardFailedError } from './shard-failed-error.js';

const S = ShardState;

/** First wait between readiness probes; doubles up to READY_POLL_MAX_MS. Fast first, because small models load in seconds. */
export const READY_POLL_MIN_MS = 100;
export const READY_POLL_MAX_MS = 2000;
/** How often an adopted engine (not our child: no exit event) is checked for being gone. The bound: at most every 500 ms. */
export const IDENTITY_POLL_MS = 500;
/** Consecutive failed /health probes after READY that make a shard UNHEALTHY. One miss is noise; three is a hang. */
export const UNHEALTHY_AFTER_FAILURES = 3;
/** SIGTERM to SIGKILL for what survives a dead engine leader: its work is lost already. */
export const LEFTOVER_GRACE_MS = 2000;
/** Log lines kept in lastOutput when a shard fails or exits. */
export const LAST_OUTPUT_LINES = 20;

export interface SupervisorOptions {
  config: SupervisorConfig;
  logger?: Logger;
  /** How often logs are checked against config.logMaxBytes; default LOG_CHECK_INTERVAL_MS (2 s). */
  logCheckIntervalMs?: number;
}

export interface StartOptions {
  servesHttp: boolean;
  /** Prometheus gauge of in-flight requests, read while draining; default by profile.engine (vLLM's name). */
  inFlightMetric?: string;
}

export interface WaitReadyOptions {
  baseUrl: string;
  servedModelName: string;
  timeoutMs: number;
  signal?: AbortSignal;
}

type DeathInfo = { known: true; code: number | null; signal: NodeJS.Signals | null } | { known: false; reason: string };

/**
 * Everything the supervisor knows about one shard: what a snapshot shows
 * (`running` is derived from `dead`), and what only the supervisor needs.
 */
interface ShardRecord extends Omit<ShardSnapshot, 'running'> {
  pgid: number;
  identity: ProcessIdentity;
  inFlightMetric: string;
  statePath: string;
  /** Our own child: its exit event tells us at once, with the status. */
  child?: ChildProcess;
  onChildExit?: (code: number | null, signal: NodeJS.Signals | null) => void;
  /** The engine process is gone (its group may not be). */
  dead: boolean;
  /** Aborted when the shard leaves STARTING, so a readiness wait wakes at once. */
  leftStarting: AbortController;
  baseUrl?: string;
  healthTimer?: NodeJS.Timeout;
  healthFailures: number;
  identityTimer?: NodeJS.Timeout;
  stopping?: Promise<ShardSnapshot>;
}

/**
 * Owns engine processes: launches them detached, records them in state
 * files, proves they serve, watches them, stops them, and takes over those a
 * previous agent left running.
 *
 * Two scopes end things here, and they must not be confused. close() is the
 * agent going away: timers, probes and followers stop, engines keep serving.
 * stop() is a shard being stopped: its whole process group is terminated.
 */
export class Supervisor extends EventEmitter<{ transition: [ShardTransition] }> {
  private readonly config: SupervisorConfig;
  private readonly log: Logger;
  private readonly shardsStateDir: string;
  private readonly shardsLogDir: string;
  private readonly shards = new Map<string, ShardRecord>();
  /** Launches in progress, so concurrent starts of one id make one process. */
  private readonly launching = new Map<string, Promise<ShardRecord>>();
  /** Aborted by close(): ends every wait, probe and follower, touches no engine. */
  private readonly closing = new AbortController();
  private readonly logTimer: NodeJS.Timeout;
  private logCheckRunning = false;

  constructor(opts: SupervisorOptions) {
    super();
    this.config = opts.config;
    this.log = opts.logger ?? silentLogger;
    this.shardsStateDir = join(this.config.stateDir, 'shards');
    this.shardsLogDir = join(this.config.logDir, 'shards');
    this.logTimer = setInterval(() => void this.checkLogs(), opts.logCheckIntervalMs ?? LOG_CHECK_INTERVAL_MS);
    this.logTimer.unref();
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * The one place a shard changes state: validated against the allowed
   * transitions, logged with the shard's fields, and emitted. A refused
   * transition is a bug and throws.
   */
  private transition(rec: ShardRecord, to: ShardState, why: string): void {
    const from = rec.state;
    if (!isTransitionAllowed(from, to)) {
      throw new Error(`shard ${rec.shardId}: transition ${stateName(from)} → ${stateName(to)} is not allowed (${why})`);
    }
    rec.state = to;
    if (from === S.STARTING) rec.leftStarting.abort();
    const fields = {
      shard: rec.shardId,
      replica: rec.replicaId,
      pid: rec.pid,
      from: stateName(from),
      to: stateName(to),
      why,
    };
    if (to === S.FAILED || to === S.UNHEALTHY) this.log.warn(fields, 'shard state changed');
    else this.log.info(fields, 'shard state changed');
    try {
      this.emit('transition', { shard: snapshotOf(rec), from, to });
    } catch (err) {
      // A listener's bug must not leave the shard half-way through a change
      // (an exit handled, a timer not cleared).
      this.log.error({ shard: rec.shardId, err: errorMessage(err) }, 'a transition listener threw');
    }
  }

  // ---------------------------------------------------------------- start

  async start(
    spec: StartShard,
    plan: LaunchPlan,
    opts: StartOptions,
  ): Promise<{ shard: ShardSnapshot; created: boolean }> {
    // First, before any path is built from it: "../x" names a file elsewhere.
    assertShardId(spec.shardId);
    if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    if (plan.argv.length === 0 || plan.argv[0] === '') throw usageError(`shard ${spec.shardId}: the launch plan has no command`);
    checkLaunchPlan(plan, engineEnv(plan));
    const id = spec.shardId;

    const existing = this.shards.get(id);
    if (existing && !isTerminal(existing.state)) return { shard: snapshotOf(existing), created: false };
    const pending = this.launching.get(id);
    if (pending) return { shard: snapshotOf(await pending), created: false };

    const launch = this.launch(spec, plan, opts, existing);
    this.launching.set(id, launch);
    try {
      return { shard: snapshotOf(await launch), created: true };
    } finally {
      this.launching.delete(id);
    }
  }

  private async launch(
    spec: StartShard,
    plan: LaunchPlan,
    opts: StartOptions,
    previous: ShardRecord | undefined,
  ): Promise<ShardRecord> {
    const id = spec.shardId;
    this.ensureDirs();
    const statePath = stateFilePath(this.shardsStateDir, id);
    const logPath = this.logPathFor(id);

    if (previous) {
      // A relaunch. The old engine may have left processes behind (a worker
      // of a leader that crashed, or an engine that timed out while loading):
      // they hold the GPUs the new one is about to ask for.
      this.detach(previous);
      await terminateProcessGroup({
        pgid: previous.pgid,
        stillOurs: () => this.groupStillOurs(previous),
        graceMs: this.config.stopGraceMs,
        signal: this.closing.signal,
      });
    } else {
      await this.refuseUnsupervisedEngine(id, statePath, logPath);
    }

    const launched = await launchEngine(this.config.launcher, id, plan, logPath, this.closing.signal);
    const rec: ShardRecord = {
      shardId: id,
      replicaId: spec.replicaId,
      spec,
      state: previous?.state ?? S.UNSPECIFIED,
      pid: launched.pid,
      pgid: launched.pgid,
      identity: launched.identity,
      adopted: false,
      servesHttp: opts.servesHttp,
      inFlightMetric: opts.inFlightMetric ?? defaultInFlightMetric(spec.profile?.engine ?? ''),
      error: '',
      exitCode: null,
      signal: null,
      lastOutput: [],
      startedAtMs: Date.now(),
      logPath,
      statePath,
      child: launched.child,
      dead: false,
      leftStarting: new AbortController(),
      healthFailures: 0,
    };
    if (rec.child) {
      const child = rec.child;
      rec.onChildExit = (code, signal) => void this.onDeath(rec, { known: true, code, signal });
      child.once('exit', rec.onChildExit);
      // It may have exited before the listener was attached.
      if (child.exitCode !== null || child.signalCode !== null) {
        child.off('exit', rec.onChildExit);
        void this.onDeath(rec, { known: true, code: child.exitCode, signal: child.signalCode });
      }
    } else {
      this.watchIdentity(rec);
    }

    try {
      await writeStateFile(this.shardsStateDir, {
        schemaVersion: STATE_SCHEMA_VERSION,
        shardId: id,
        replicaId: rec.replicaId,
        spec,
        servesHttp: rec.servesHttp,
        inFlightMetric: rec.inFlightMetric,
        pid: rec.pid,
        pgid: rec.pgid,
        identity: rec.identity,
        launcher: this.config.launcher,
        logPath,
        createdAtMs: rec.startedAtMs,
      });
    } catch (err) {
      // Without its state file this engine could not be found after an agent
      // restart, and would hold its GPUs with nothing able to describe it.
      this.detach(rec);
      await terminateProcessGroup({ pgid: rec.pgid, stillOurs: () => this.groupStillOurs(rec), graceMs: 0 });
      throw failure(`cannot write the state file ${statePath}: ${errorMessage(err)}; the engine was stopped`, {
        cause: err,
      });
    }
    this.shards.set(id, rec);
    this.transition(rec, S.STARTING, previous ? `relaunched after ${stateName(previous.state)}` : 'launched');
    return rec;
  }

  /**
   * No record here, but maybe a state file from a previous agent whose engine
   * still runs: starting a second engine on the same GPUs would fail after
   * minutes of loading, or worse, succeed beside it.
   */
  private async refuseUnsupervisedEngine(id: string, statePath: string, logPath: string): Promise<void> {
    const read = await readStateFile(statePath, id);
    if (read.ok && checkIdentity(read.file.pid, read.file.identity).alive) {
      throw failure(
        `shard ${id} is already running (pid ${read.file.pid}) from a previous agent; adopt it (findOrphans/adopt) instead of starting it again`,
      );
    }
    const holders = findProcessesLoggingTo(logPath);
    if (holders.length > 0) {
      throw failure(
        `processes ${holders.map((p) => p.pid).join(', ')} still write shard ${id}'s log but nothing identifies them; kill them (killOrphan) before starting it again`,
      );
    }
    await removeStateFile(statePath);
  }

  private ensureDirs(): void {
    mkdirSync(this.shardsStateDir, { recursive: true, mode: 0o700 });
    // State files name pids this agent will signal: nobody else may write here.
    chmodSync(this.shardsStateDir, 0o700);
    mkdirSync(this.shardsLogDir, { recursive: true, mode: 0o755 });
  }

  private logPathFor(id: string): string {
    return join(this.shardsLogDir, `${id}.log`);
  }

  // ---------------------------------------------------------------- queries

  get(shardId: string): ShardSnapshot | undefined {
    const rec = this.shards.get(shardId);
    return rec && snapshotOf(rec);
  }

  list(): ShardSnapshot[] {
    return [...this.shards.values()].map(snapshotOf);
  }

  private mustGet(shardId: string): ShardRecord {
    assertShardId(shardId);
    const rec = this.shards.get(shardId);
    if (!rec) throw usageError(`no shard ${shardId} is supervised here`);
    return rec;
  }

  // ---------------------------------------------------------------- readiness

  async waitReady(shardId: string, opts: WaitReadyOptions): Promise<void> {
    const rec = this.mustGet(shardId);
    if (!this.enterWait(rec)) return;
    rec.baseUrl = opts.baseUrl;
    const deadline = Date.now() + opts.timeoutMs;
    const wake = this.waitSignal(rec, opts.signal);
    let delayMs = READY_POLL_MIN_MS;
    let lastReason = 'not probed yet';
    for (;;) {
      this.throwUnlessStarting(rec, opts.signal);
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      let result: Awaited<ReturnType<typeof probeReady>>;
      try {
        result = await probeReady(opts.baseUrl, opts.servedModelName, {
          timeoutMs: Math.min(PROBE_TIMEOUT_MS, remaining),
          signal: wake,
        });
      } catch {
        continue; // woken: the loop head says why
      }
      this.throwUnlessStarting(rec, opts.signal);
      if (result.ok) {
        this.transition(rec, S.READY, `answers /health and lists ${JSON.stringify(opts.servedModelName)}`);
        this.watchAfterReady(rec);
        return;
      }
      lastReason = result.reason;
      await sleep(Math.min(delayMs, Math.max(0, deadline - Date.now())), undefined, { signal: wake }).catch(() => {});
      delayMs = Math.min(delayMs * 2, READY_POLL_MAX_MS);
    }
    this.throwUnlessStarting(rec, opts.signal);
    // Left running: the control plane decides whether to stop it, and stop()
    // (or a new start of this id) takes its whole group down.
    const message = `not ready after ${formatDuration(opts.timeoutMs)}: ${lastReason}`;
    rec.error = message;
    rec.lastOutput = await this.lastLines(rec);
    if (rec.state === S.STARTING) this.transition(rec, S.FAILED, message);
    throw this.failedError(rec);
  }

  async waitAlive(shardId: string, opts: { settleMs?: number; signal?: AbortSignal } = {}): Promise<void> {
    const rec = this.mustGet(shardId);
    if (!this.enterWait(rec)) return;
    const settleMs = opts.settleMs ?? this.config.workerSettleMs;
    await sleep(settleMs, undefined, { signal: this.waitSignal(rec, opts.signal) }).catch(() => {});
    this.throwUnlessStarting(rec, opts.signal);
    this.transition(rec, S.READY, `stayed alive ${formatDuration(settleMs)}`);
    this.watchAfterReady(rec);
  }

  /** False when already past STARTING and serving (nothing to wait for); throws when it cannot become ready. */
  private enterWait(rec: ShardRecord): boolean {
    if (rec.state === S.STARTING) return true;
    if (rec.state === S.READY || rec.state === S.UNHEALTHY || rec.state === S.DRAINING) return false;
    if (rec.state === S.STOPPING) throw failure(`shard ${rec.shardId} is being stopped`);
    throw this.failedError(rec);
  }

  /** Wakes a wait when the caller gives up, the supervisor closes, or the shard leaves STARTING (died, stopped). */
  private waitSignal(rec: ShardRecord, signal?: AbortSignal): AbortSignal {
    const signals = [this.closing.signal, rec.leftStarting.signal];
    if (signal) signals.push(signal);
    return AbortSignal.any(signals);
  }

  private throwUnlessStarting(rec: ShardRecord, signal?: AbortSignal): void {
    signal?.throwIfAborted();
    if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    if (rec.state === S.STARTING) return;
    if (rec.state === S.STOPPING || rec.state === S.STOPPED) throw failure(`shard ${rec.shardId} was stopped while starting`);
    throw this.failedError(rec);
  }

  private failedError(rec: ShardRecord): ShardFailedError {
    return new ShardFailedError(rec.shardId, `shard ${rec.shardId}: ${rec.error || stateName(rec.state)}`, {
      exitCode: rec.exitCode,
      signal: rec.signal,
      lastOutput: rec.lastOutput,
    });
  }

  // ---------------------------------------------------------------- watching

  /**
   * After READY: a serving rank's /health is probed (a hung NCCL collective
   * keeps the pid alive, so only a probe sees it). UNHEALTHY is reported, not
   * acted on: killing here would race the control plane, which owns the
   * decision to replace an engine.
   */
  private watchAfterReady(rec: ShardRecord): void {
    if (!rec.baseUrl || this.closing.signal.aborted) return;
    const baseUrl = rec.baseUrl;
    const intervalMs = this.config.healthIntervalMs;
    const probe = async () => {
      rec.healthTimer = undefined;
      const result = await probeHealth(baseUrl, {
        // Never longer than an interval, so one hung probe cannot hide the next ones.
        timeoutMs: Math.min(PROBE_TIMEOUT_MS, Math.max(500, intervalMs)),
        signal: this.closing.signal,
      }).catch((err: unknown) => ({ ok: false as const, loading: false, reason: errorMessage(err) }));
      if (this.closing.signal.aborted || this.shards.get(rec.shardId) !== rec || isTerminal(rec.state)) return;
      if (rec.state === S.STOPPING) return;
      if (result.ok) {
        rec.healthFailures = 0;
        if (rec.state === S.UNHEALTHY) this.transition(rec, S.READY, '/health answers again');
      } else {
        rec.healthFailures++;
        if (rec.healthFailures >= UNHEALTHY_AFTER_FAILURES && rec.state === S.READY) {
          this.transition(rec, S.UNHEALTHY, `${rec.healthFailures} health probes failed in a row: ${result.reason}`);
        }
      }
      rec.healthTimer = setTimeout(probe, intervalMs);
      rec.healthTimer.unref();
    };
    rec.healthTimer = setTimeout(probe, intervalMs);
    rec.healthTimer.unref();
  }

  /**
   * An engine that is not our child sends no exit event: it is checked by
   * identity, so a pid reused after its death reads as dead, not as alive.
   */
  private watchIdentity(rec: ShardRecord): void {
    rec.identityTimer = setInterval(() => {
      if (rec.dead) return;
      const check = checkIdentity(rec.pid, rec.identity);
      if (!check.alive) void this.onDeath(rec, { known: false, reason: check.reason });
    }, IDENTITY_POLL_MS);
    rec.identityTimer.unref();
  }

  private async onDeath(rec: ShardRecord, info: DeathInfo): Promise<void> {
    if (rec.dead || this.closing.signal.aborted) return;
    rec.dead = true;
    if (rec.identityTimer) clearInterval(rec.identityTimer);
    if (rec.healthTimer) clearTimeout(rec.healthTimer);
    if (info.known) {
      rec.signal = info.signal;
      rec.exitCode = info.code ?? (info.signal ? 128 + (osConstants.signals[info.signal] ?? 0) : null);
    }
    const how = info.known
      ? info.signal
        ? `was killed by ${info.signal}`
        : `exited with code ${info.code}`
      : `is gone (${info.reason}; not a child of this agent, so its exit status is unknown)`;
    // Read before the state changes, so the report carries the engine's own last words.
    const lastOutput = await this.lastLines(rec);
    if (this.closing.signal.aborted || this.shards.get(rec.shardId) !== rec) return;
    if (rec.state !== S.STOPPING && !isTerminal(rec.state)) await this.reapLeftovers(rec);
    if (this.closing.signal.aborted || this.shards.get(rec.shardId) !== rec) return;
    const state = rec.state;
    if (state === S.STARTING) {
      rec.error = `engine ${how} while starting`;
      rec.lastOutput = lastOutput;
      this.transition(rec, S.FAILED, rec.error);
    } else if (state === S.READY || state === S.UNHEALTHY || state === S.DRAINING) {
      rec.error = `engine ${how}`;
      rec.lastOutput = lastOutput;
      const clean = info.known && info.code === 0;
      this.transition(rec, clean ? S.EXITED : S.FAILED, rec.error);
    }
    // STOPPING: stop() reports it. Terminal: already reported.
  }

  /**
   * The leader is gone, but its process group may not be: workers of a
   * crashed engine, or the server a launcher forked before it exited. They
   * are ended before FAILED or EXITED is reported, because those states tell
   * the control plane the GPUs are free: left running, they held GPU memory
   * and the port while a new shard was placed on them (found by the fault
   * campaign, engine-fork-and-exit).
   */
  private async reapLeftovers(rec: ShardRecord): Promise<void> {
    if (listProcessGroup(rec.pgid).length === 0) return;
    try {
      const outcome = await terminateProcessGroup({
        pgid: rec.pgid,
        stillOurs: () => this.groupStillOurs(rec),
        graceMs: Math.min(LEFTOVER_GRACE_MS, this.config.stopGraceMs),
        signal: this.closing.signal,
      });
      this.log.warn({ shard: rec.shardId, replica: rec.replicaId, pid: rec.pid, outcome }, 'engine leader gone; ended the rest of its process group');
    } catch (err) {
      this.log.warn({ shard: rec.shardId, pid: rec.pid, err: errorMessage(err) }, 'ending the rest of a dead engine\'s process group failed');
    }
  }

  private async lastLines(rec: ShardRecord): Promise<string[]> {
    return tailFile(rec.logPath, LAST_OUTPUT_LINES).catch(() => []);
  }

  /** Stops every timer and listener of a record; touches no process. */
  private detach(rec: ShardRecord): void {
    if (rec.identityTimer) clearInterval(rec.identityTimer);
    if (rec.healthTimer) clearTimeout(rec.healthTimer);
    rec.identityTimer = undefined;
    rec.healthTimer = undefined;
    if (rec.child && rec.onChildExit) rec.child.off('exit', rec.onChildExit);
  }

  /**
   * Whether signalling the shard's process group still reaches the engine we
   * launched. Our unreaped child cannot have had its pid reused. Otherwise
   * the leader's start time must match; and when the leader is gone entirely,
   * Linux keeps its pid reserved for as long as it names a live process
   * group, so surviving members are still that group.
   */
  private groupStillOurs(rec: ShardRecord): boolean {
    if (rec.child && rec.child.exitCode === null && rec.child.signalCode === null) return true;
    if (rec.identity.bootId !== readBootId()) return false;
    const stat = readProcStat(rec.pid);
    if (!stat) return true;
    return stat.startTime === rec.identity.startTime;
  }

  // ---------------------------------------------------------------- stop, drain

  async stop(shardId: string, opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    const rec = this.mustGet(shardId);
    rec.stopping ??= this.doStop(rec, opts).finally(() => {
      rec.stopping = undefined;
    });
    return rec.stopping;
  }

  private async doStop(rec: ShardRecord, opts: { graceMs?: number; signal?: AbortSignal }): Promise<ShardSnapshot> {
    const graceMs = opts.graceMs ?? this.config.stopGraceMs;
    const wasTerminal = isTerminal(rec.state);
    if (rec.state !== S.STOPPING && !wasTerminal) this.transition(rec, S.STOPPING, `stop requested (grace ${formatDuration(graceMs)})`);
    if (rec.healthTimer) clearTimeout(rec.healthTimer);
    rec.healthTimer = undefined;
    const outcome = await terminateProcessGroup({
      pgid: rec.pgid,
      stillOurs: () => this.groupStillOurs(rec),
      graceMs,
      signal: opts.signal,
    });
    if (outcome === 'not-ours') {
      this.log.warn({ shard: rec.shardId, pid: rec.pid }, 'engine pid now names another process; nothing was signalled');
    }
    // Gone either way: terminated, or its pid names another process now.
    rec.dead = true;
    this.detach(rec);
    // Gone from disk before STOPPED is announced: whoever hears STOPPED may
    // rely on nothing of the shard being left, here or after a restart.
    await this.forgetStateFile(rec);
    if (rec.state === S.STOPPING) this.transition(rec, S.STOPPED, `process group ${outcome}`);
    return snapshotOf(rec);
  }

  drain(shardId: string): ShardSnapshot {
    const rec = this.mustGet(shardId);
    if (rec.state === S.READY || rec.state === S.UNHEALTHY) this.transition(rec, S.DRAINING, 'drain requested');
    else if (rec.state !== S.DRAINING) {
      throw usageError(`shard ${shardId} is ${stateName(rec.state)}: only a READY or UNHEALTHY shard can be drained`);
    }
    return snapshotOf(rec);
  }

  /** Requests the engine is working on, from its metrics gauge; undefined when it cannot tell. */
  async inFlight(shardId: string): Promise<number | undefined> {
    const rec = this.mustGet(shardId);
    const baseUrl = rec.baseUrl ?? (rec.servesHttp && rec.spec.httpPort > 0 ? `http://127.0.0.1:${rec.spec.httpPort}` : undefined);
    if (!baseUrl || rec.inFlightMetric === '') return undefined;
    try {
      const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal: this.closing.signal });
      return r.status === 200 ? readGauge(r.body, rec.inFlightMetric) : undefined;
    } catch {
      return undefined;
    }
  }

  remove(shardId: string): void {
    const rec = this.mustGet(shardId);
    if (!isTerminal(rec.state)) {
      throw usageError(`shard ${shardId} is ${stateName(rec.state)}: stop it before removing it`);
    }
    this.detach(rec);
    this.shards.delete(shardId);
    try {
      unlinkSync(rec.statePath);
    } catch (err) {
      // Same reasoning as forgetStateFile: the shard is gone whatever the disk says.
      if (errnoCode(err) !== 'ENOENT') this.log.warn({ shard: shardId, file: rec.statePath, err: errorMessage(err) }, 'shard removed but its state file could not be');
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
  private async forgetStateFile(rec: ShardRecord): Promise<void> {
    try {
      await removeStateFile(rec.statePath);
    } catch (err) {
      this.log.warn({ shard: rec.shardId, file: rec.statePath, err: errorMessage(err) }, 'engine is gone but its state file could not be removed');
    }
  }

  // ---------------------------------------------------------------- logs

  /** The last lines of a shard's log (also of one no longer supervised); none when there is no log. */
  async tailLog(shardId: string, lines: number): Promise<string[]> {
    assertShardId(shardId);
    return tailFile(this.logPathFor(shardId), lines);
  }

  /**
   * New log lines as they are written, across rotation, after the last
   * `backlogLines` already written (the first batch); ends when the shard is
   * removed, on `signal`, or on close().
   */
  async *followLog(shardId: string, signal: AbortSignal, backlogLines = 0): AsyncIterable<string[]> {
    const rec = this.mustGet(shardId);
    yield* followFile(rec.logPath, {
      backlogLines,
      signal: AbortSignal.any([signal, this.closing.signal]),
      isDone: () => this.shards.get(shardId) !== rec || this.closing.signal.aborted,
    });
  }

  private async checkLogs(): Promise<void> {
    if (this.logCheckRunning) return;
    this.logCheckRunning = true;
    try {
      for (const rec of this.shards.values()) {
        if (isTerminal(rec.state) && rec.dead) continue;
        try {
          if (await rotateLogIfNeeded(rec.logPath, this.config.logMaxBytes)) {
            this.log.info({ shard: rec.shardId, replica: rec.replicaId, pid: rec.pid }, 'rotated shard log');
          }
        } catch (err) {
          this.log.warn({ shard: rec.shardId, err: errorMessage(err) }, 'rotating shard log failed');
        }
      }
    } finally {
      this.logCheckRunning = false;
    }
  }

  // ---------------------------------------------------------------- orphans

  /**
   * Shards this instance does not supervise but a previous agent left
   * behind, each judged alive or dead and identified or not: every state
   * file, and every shard log that a running process still writes although
   * no state file names it.
   *
   * The second kind is an agent killed between launching an engine and
   * writing its state file. Nothing else records that engine: without this
   * scan it would serve on, holding its GPUs and port, invisible to the
   * agent, and every later start of the shard would be refused because its
   * port is taken (found by the fault campaign, issue 9).
   */
  async findOrphans(): Promise<Orphan[]> {
    let names: string[];
    try {
      names = readdirSync(this.shardsStateDir);
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') throw err;
      names = [];
    }
    const ids = new Set<string>();
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      const id = name.slice(0, -'.json'.length);
      if (!isValidShardId(id)) {
        this.log.warn({ file: name }, 'ignoring a state file whose name is not a shard id');
        continue;
      }
      ids.add(id);
    }
    for (const [logPath] of findProcessesLoggingUnder(this.shardsLogDir)) {
      const id = basename(logPath).replace(/\.log$/, '');
      if (logPath === this.logPathFor(id) && isValidShardId(id)) ids.add(id);
    }
    const orphans: Orphan[] = [];
    for (const id of [...ids].sort()) {
      if (this.shards.has(id)) continue;
      orphans.push(await this.judgeOrphan(id));
    }
    return orphans;
  }

  private async judgeOrphan(id: string): Promise<Orphan> {
    const read = await readStateFile(stateFilePath(this.shardsStateDir, id), id);
    // Whatever the file says, a process writing this shard's log is this
    // shard's: that is how an engine with an unreadable state file is found.
    const holders = findProcessesLoggingTo(this.logPathFor(id));
    const holderPid = holders.find((p) => p.pid === p.pgid)?.pid ?? holders[0]?.pid ?? 0;
    const stray = holders.length > 0 ? `; ${holders.length} process(es) still write the shard's log` : '';
    if (!read.ok) {
      return {
        shardId: id,
        pid: holderPid,
        alive: holders.length > 0,
        identified: false,
        reason: read.reason + (stray || '; no process writes the shard log'),
        replicaId: '',
        servesHttp: false,
      };
    }
    const f = read.file;
    const described = { shardId: id, spec: f.spec, replicaId: f.replicaId, servesHttp: f.servesHttp };
    const check = checkIdentity(f.pid, f.identity);
    if (check.alive) return { ...described, pid: f.pid, alive: true, identified: true, reason: '' };
    return { ...described, pid: holderPid || f.pid, alive: holders.length > 0, identified: false, reason: check.reason + stray };
  }

  /**
   * Dead: the state file is removed and nothing is signalled. Alive: every
   * process group still writing the shard's log (and the recorded group, if
   * its identity still matches) is terminated, then the file is removed.
   * A pid that merely appears in the file is never a reason to signal it.
   */
  async killOrphan(o: Orphan, opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<void> {
    assertShardId(o.shardId);
    if (this.shards.has(o.shardId)) throw usageError(`shard ${o.shardId} is supervised here; stop it instead`);
    const statePath = stateFilePath(this.shardsStateDir, o.shardId);
    const logPath = this.logPathFor(o.shardId);
    const graceMs = opts.graceMs ?? this.config.stopGraceMs;
    const ownGroup = readProcStat(process.pid)?.pgrp;
    const groups = new Set<number>();
    const read = await readStateFile(statePath, o.shardId);
    if (read.ok && checkIdentity(read.file.pid, read.file.identity).alive) groups.add(read.file.pgid);
    for (const p of findProcessesLoggingTo(logPath)) groups.add(p.pgid);
    for (const pgid of groups) {
      // Never our own group: that would be the agent killing itself.
      if (pgid <= 1 || pgid === ownGroup) continue;
      this.log.warn({ shard: o.shardId, pgid, reason: o.reason }, 'killing an engine nothing can describe');
      await terminateProcessGroup({
        pgid,
        // Still ours while a member of the group writes this shard's log, or the identified leader lives.
        stillOurs: () =>
          findProcessesLoggingTo(logPath).some((p) => p.pgid === pgid) ||
          (read.ok && read.file.pgid === pgid && checkIdentity(read.file.pid, read.file.identity).alive),
        graceMs,
        signal: opts.signal,
      });
    }
    await removeStateFile(statePath);
  }

  /**
   * Takes over an identified, live engine as a shard in STARTING. The caller
   * then settles it exactly like a fresh start (waitReady or waitAlive):
   * leaving it in STARTING once made the control plane time out and replace
   * a healthy engine after every agent restart.
   */
  adopt(o: Orphan): ShardSnapshot {
    assertShardId(o.shardId);
    const existing = this.shards.get(o.shardId);
    if (existing && !isTerminal(existing.state)) throw usageError(`shard ${o.shardId} is already supervised here`);
    const statePath = stateFilePath(this.shardsStateDir, o.shardId);
    // Read again, synchronously: the orphan was judged a moment ago, and the
    // engine may have died (and its pid been reused) since.
    const f = readStateFileSync(statePath, o.shardId);
    if (!f.ok) throw failure(`cannot adopt shard ${o.shardId}: ${f.reason}`);
    const check = checkIdentity(f.file.pid, f.file.identity);
    if (!check.alive) throw failure(`cannot adopt shard ${o.shardId}: ${check.reason}`);
    if (existing) this.detach(existing);
    const rec: ShardRecord = {
      shardId: o.shardId,
      replicaId: f.file.replicaId,
      spec: f.file.spec,
      state: existing?.state ?? S.UNSPECIFIED,
      pid: f.file.pid,
      pgid: f.file.pgid,
      identity: f.file.identity,
      adopted: true,
      servesHttp: f.file.servesHttp,
      inFlightMetric: f.file.inFlightMetric,
      error: '',
      exitCode: null,
      signal: null,
      lastOutput: [],
      startedAtMs: f.file.createdAtMs,
      logPath: this.logPathFor(o.shardId),
      statePath,
      dead: false,
      leftStarting: new AbortController(),
      healthFailures: 0,
    };
    this.shards.set(o.shardId, rec);
    this.watchIdentity(rec);
    this.transition(rec, S.STARTING, 'adopted from a previous agent');
    return snapshotOf(rec);
  }

  /** Agent shutdown: stops timers, probes, waits and followers. Never signals an engine. */
  close(): void {
    if (this.closing.signal.aborted) return;
    this.closing.abort(failure('the supervisor is closed'));
    clearInterval(this.logTimer);
    for (const rec of this.shards.values()) this.detach(rec);
  }
}

function snapshotOf(rec: ShardRecord): ShardSnapshot {
  return {
    shardId: rec.shardId,
    replicaId: rec.replicaId,
    spec: rec.spec,
    state: rec.state,
    pid: rec.pid,
    adopted: rec.adopted,
    servesHttp: rec.servesHttp,
    error: rec.error,
    exitCode: rec.exitCode,
    signal: rec.signal,
    lastOutput: [...rec.lastOutput],
    startedAtMs: rec.startedAtMs,
    logPath: rec.logPath,
    running: !rec.dead,
  };
}
