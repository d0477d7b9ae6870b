import { EventEmitter } from 'node:events';
import { existsSync, unlinkSync } from 'node:fs';
import type { SupervisorConfig } from '../config/agent-config.js';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { isNotFound } from '../../lib/errno.js';
import { errorMessage, failure } from '../../lib/errors.js';
import { followFile } from '../../lib/files/follow-file.js';
import { LOG_CHECK_INTERVAL_MS, rotateLogIfNeeded } from '../../lib/files/rotate-log.js';
import { readStateFile, readStateFileSync, removeStateFile } from '../../lib/files/state-file.js';
import { tailFile } from '../../lib/files/tail-file.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { findRecordedShardIds, judgeOrphan } from '../../lib/process/judge-orphan.js';
import type { Orphan } from '../../lib/process/orphan.js';
import { readProcStat } from '../../lib/process/proc-stat.js';
import { checkIdentity } from '../../lib/process/process-identity.js';
import { findProcessesLoggingTo } from '../../lib/process/process-table.js';
import { terminateProcessGroup } from '../../lib/process/terminate-process-group.js';
import { assertShardId } from '../../lib/shard-id.js';
import { previousRunLogPath, shardLogPath, shardStatePath } from '../../lib/shard-layout.js';
import { isTerminal } from '../../lib/shard-states.js';
import { type LauncherChoice, chooseLauncher } from './choose-launcher.js';
import { isSameRun } from './engine-unit.js';
import { stopEngineUnit } from './stop-engine-unit.js';
import { readUnitStatus } from '../../lib/systemd/read-unit-status.js';
import { type ShardLaunch, launchShard } from './launch-shard.js';
import { judgeUnitOrphan } from './unit-orphan.js';
import { reattachShard } from './reattach-shard.js';
import { RepeatedStartError } from './repeated-start-error.js';
import type { SettleOptions, ShardRunner, ShardRunnerContext } from './shard-runner.js';
import type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
import { stateName } from './shard-transitions.js';

// The contract's types, importable from here as well as from their own files.
export type { Orphan } from '../../lib/process/orphan.js';
export type { ShardSnapshot, ShardTransition } from './shard-snapshot.js';
export type { ShardLaunch } from './launch-shard.js';
export type { SettleOptions } from './shard-runner.js';
export { ShardFailedError } from './shard-failed-error.js';
export { RepeatedStartError } from './repeated-start-error.js';

export interface SupervisorOptions {
  config: SupervisorConfig;
  logger?: Logger;
  /** How often logs are checked against config.logMaxBytes; default LOG_CHECK_INTERVAL_MS (2 s). */
  logCheckIntervalMs?: number;
}

/** A launch, or how to make one: validation runs after the shard id is reserved, so a repeat never validates beside it. */
export type LaunchSource = ShardLaunch | (() => Promise<ShardLaunch>);

/**
 * The registry of shard runners: the one idempotency check by shard id, the
 * shard table, transitions out, log rotation, and the engines a previous
 * agent left (found, judged, killed or reattached).
 *
 * close() is the agent going away: every runner is detached and every
 * engine keeps serving. Stopping an engine is stop(), one shard at a time.
 */
export class Supervisor extends EventEmitter<{ transition: [ShardTransition] }> {
  private readonly config: SupervisorConfig;
  private readonly log: Logger;
  private readonly ctx: ShardRunnerContext;
  private readonly runners = new Map<string, ShardRunner>();
  /** Launches in progress: the one place concurrent starts of an id become one process. Undefined when it was refused. */
  private readonly launching = new Map<string, Promise<ShardRunner | undefined>>();
  /** Aborted by close(): ends launches in progress, touches no engine. */
  private readonly closing = new AbortController();
  private readonly logTimer: NodeJS.Timeout;
  private logCheckRunning = false;
  private launcherChoice: Promise<LauncherChoice> | undefined;

  constructor(opts: SupervisorOptions) {
    super();
    this.config = opts.config;
    this.log = opts.logger ?? silentLogger;
    this.ctx = { config: this.config, log: this.log, onTransition: (t) => this.emit('transition', t), launcher: () => this.launcher() };
    this.logTimer = setInterval(() => void this.checkLogs(), opts.logCheckIntervalMs ?? LOG_CHECK_INTERVAL_MS);
    this.logTimer.unref();
  }

  // ---------------------------------------------------------------- start

  /**
   * The launcher new engines get: config.launcher, with `auto` decided once
   * (chooseLauncher) and logged once with the reason, so an operator reading
   * the journal knows whether stops fence by cgroup or by process group.
   */
  launcher(): Promise<LauncherChoice> {
    this.launcherChoice ??= chooseLauncher(this.config.launcher).then((choice) => {
      this.log.info({ launcher: choice.launcher, why: choice.why }, `engines are launched with ${choice.launcher}`);
      return choice;
    });
    return this.launcherChoice;
  }

  /**
   * Launches shard `spec.shardId` unless it already runs here or is being
   * launched: the control plane retries, and a repeat must never make a
   * second process, so it gets the shard as it is (`created: false`).
   */
  async start(spec: StartShard, source: LaunchSource): Promise<{ shard: ShardSnapshot; created: boolean }> {
    const reserved = this.reserve(spec, source);
    if (reserved.kind === 'running') return { shard: reserved.runner.snapshot(), created: false };
    if (reserved.kind === 'pending') {
      const runner = await reserved.launch;
      if (!runner) throw new RepeatedStartError(spec.shardId);
      return { shard: runner.snapshot(), created: false };
    }
    const { launch } = reserved;
    const id = spec.shardId;
    // Repeats wait for this one; only its own caller hears why it was refused.
    const settled = launch.then(
      (r) => r,
      () => undefined,
    );
    this.launching.set(id, settled);
    try {
      const r = await launch;
      return { shard: r.snapshot(), created: true };
    } finally {
      // Only after the runner is in the table, so that no repeat finds neither.
      if (this.launching.get(id) === settled) this.launching.delete(id);
    }
  }

  /**
   * The synchronous step before any `await` of a start: validates the id (it
   * names files), finds a shard already running or being launched, and
   * otherwise claims the id by starting the launch. Whatever a shard must
   * hold exclusively (GPUs, its port) belongs here too, so that two starts
   * can never both pass.
   */
  private reserve(
    spec: StartShard,
    source: LaunchSource,
  ):
    | { kind: 'running'; runner: ShardRunner }
    | { kind: 'pending'; launch: Promise<ShardRunner | undefined> }
    | { kind: 'new'; launch: Promise<ShardRunner> } {
    // First, before any path is built from it: "../x" names a file elsewhere.
    assertShardId(spec.shardId);
    if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    const id = spec.shardId;
    const existing = this.runners.get(id);
    if (existing && !isTerminal(existing.currentState)) return { kind: 'running', runner: existing };
    const pending = this.launching.get(id);
    if (pending) return { kind: 'pending', launch: pending };
    return { kind: 'new', launch: this.launch(spec, source, existing) };
  }

  private async launch(spec: StartShard, source: LaunchSource, previous: ShardRunner | undefined): Promise<ShardRunner> {
    const launch = typeof source === 'function' ? await source() : source;
    if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    const runner = await launchShard(this.ctx, spec, launch, previous, this.closing.signal);
    this.runners.set(spec.shardId, runner);
    runner.begin(previous ? `relaunched after ${stateName(previous.currentState)}` : 'launched');
    return runner;
  }

  /** Resolves once a start of `shardId` in progress has launched or been refused, so that a stop never races it. */
  async launchSettled(shardId: string): Promise<void> {
    await this.launching.get(shardId);
  }

  /** Brings a launched or adopted shard to READY (see ShardRunner.settle); throws ShardFailedError when it cannot. */
  settle(shardId: string, opts: SettleOptions): Promise<void> {
    return this.mustGet(shardId).settle(opts);
  }

  // ---------------------------------------------------------------- queries

  get(shardId: string): ShardSnapshot | undefined {
    return this.runners.get(shardId)?.snapshot();
  }

  list(): ShardSnapshot[] {
    return [...this.runners.values()].map((r) => r.snapshot());
  }

  private mustGet(shardId: string): ShardRunner {
    assertShardId(shardId);
    const runner = this.runners.get(shardId);
    if (!runner) throw failure(`no shard ${shardId} is supervised here`);
    return runner;
  }

  // ---------------------------------------------------------------- stop, drain

  stop(shardId: string, opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    return this.mustGet(shardId).stop(opts);
  }

  drain(shardId: string): Promise<ShardSnapshot> {
    return this.mustGet(shardId).drain();
  }

  cancelDrain(shardId: string): Promise<ShardSnapshot> {
    return this.mustGet(shardId).cancelDrain();
  }

  /** A fault of the shard's GPUs (ShardRunner.markGpuFault), or undefined once they are sound; an unknown shard is ignored. */
  setGpuFault(shardId: string, reason: string | undefined): void {
    const runner = this.runners.get(shardId);
    if (reason === undefined) runner?.clearGpuFault();
    else runner?.markGpuFault(reason);
  }

  /** Requests the engine is working on, from its metrics gauge; undefined when it cannot tell. */
  inFlight(shardId: string): Promise<number | undefined> {
    return this.mustGet(shardId).inFlight();
  }

  remove(shardId: string): void {
    const runner = this.mustGet(shardId);
    if (!isTerminal(runner.currentState)) {
      throw failure(`shard ${shardId} is ${stateName(runner.currentState)}: stop it before removing it`);
    }
    runner.detach();
    this.runners.delete(shardId);
    try {
      unlinkSync(runner.statePath);
    } catch (err) {
      // Same reasoning as ShardRunner.forgetStateFile: the shard is gone whatever the disk says.
      if (!isNotFound(err)) this.log.warn({ shard: shardId, file: runner.statePath, err: errorMessage(err) }, 'shard removed but its state file could not be');
    }
  }

  // ---------------------------------------------------------------- logs

  /** The last lines of a shard's log (also of one no longer supervised); none when there is no log. */
  async tailLog(shardId: string, lines: number): Promise<string[]> {
    assertShardId(shardId);
    return tailFile(shardLogPath(this.config.logDir, shardId), lines);
  }

  /** The last lines of the run before the current one (see keepPreviousRun); undefined when none is kept. */
  async tailPreviousLog(shardId: string, lines: number): Promise<string[] | undefined> {
    assertShardId(shardId);
    const path = previousRunLogPath(this.config.logDir, shardId, 1);
    if (!existsSync(path)) return undefined;
    return tailFile(path, lines);
  }

  /**
   * New log lines as they are written, across rotation, after the last
   * `backlogLines` already written (the first batch); ends when the shard is
   * removed, on `signal`, or on close().
   */
  async *followLog(shardId: string, signal: AbortSignal, backlogLines = 0): AsyncIterable<string[]> {
    const runner = this.mustGet(shardId);
    yield* followFile(runner.logPath, {
      backlogLines,
      signal: AbortSignal.any([signal, this.closing.signal]),
      isDone: () => this.runners.get(shardId) !== runner || this.closing.signal.aborted,
    });
  }

  private async checkLogs(): Promise<void> {
    if (this.logCheckRunning) return;
    this.logCheckRunning = true;
    try {
      for (const r of this.runners.values()) {
        if (isTerminal(r.currentState) && !r.running) continue;
        try {
          if (await rotateLogIfNeeded(r.logPath, this.config.logMaxBytes)) {
            this.log.info({ shard: r.shardId, replica: r.replicaId, pid: r.pid }, 'rotated shard log');
          }
        } catch (err) {
          this.log.warn({ shard: r.shardId, err: errorMessage(err) }, 'rotating shard log failed');
        }
      }
    } finally {
      this.logCheckRunning = false;
    }
  }

  // ---------------------------------------------------------------- engines a previous agent left

  /**
   * Shards this instance does not supervise but a previous agent left
   * behind, each judged alive or dead and identified or not (judgeOrphan).
   */
  async findOrphans(): Promise<Orphan[]> {
    const ids = findRecordedShardIds(this.config, (file) => this.log.warn({ file }, 'ignoring a state file whose name is not a shard id'));
    const orphans: Orphan[] = [];
    for (const id of ids.filter((id) => !this.runners.has(id))) {
      const o = judgeOrphan(this.config, id);
      const read = readStateFileSync(shardStatePath(this.config.stateDir, id), id);
      orphans.push(read.ok ? await judgeUnitOrphan(o, read.file, this.log) : o);
    }
    return orphans;
  }

  /**
   * Dead: the state file is removed and nothing is signalled. Alive: every
   * process group still writing the shard's log (and the recorded group, if
   * its identity still matches) is terminated, then the file is removed.
   * A pid that merely appears in the file is never a reason to signal it.
   */
  async killOrphan(o: Orphan, opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<void> {
    assertShardId(o.shardId);
    if (this.runners.has(o.shardId)) throw failure(`shard ${o.shardId} is supervised here; stop it instead`);
    const statePath = shardStatePath(this.config.stateDir, o.shardId);
    const logPath = shardLogPath(this.config.logDir, o.shardId);
    const graceMs = opts.graceMs ?? this.config.stopGraceMs;
    const ownGroup = readProcStat(process.pid)?.pgrp;
    const groups = new Set<number>();
    const read = await readStateFile(statePath, o.shardId);
    const unit = read.ok ? read.file.unit : undefined;
    if (unit) {
      // Its cgroup first: that ends workers outside its process group too. Only the recorded run, never another unit of the name.
      const status = await readUnitStatus(unit.name).catch(() => undefined);
      if (status && isSameRun(status, unit)) {
        this.log.warn({ shard: o.shardId, unit: unit.name, reason: o.reason }, 'stopping the unit of an engine left by a previous agent');
        await stopEngineUnit(unit, { graceMs, signal: opts.signal });
      }
    }
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
   * then settles it exactly like a fresh start (settle), with its own timeout.
   */
  adopt(o: Orphan): ShardSnapshot {
    assertShardId(o.shardId);
    const existing = this.runners.get(o.shardId);
    if (existing && !isTerminal(existing.currentState)) throw failure(`shard ${o.shardId} is already supervised here`);
    const runner = reattachShard(this.ctx, o, existing);
    existing?.detach();
    this.runners.set(o.shardId, runner);
    runner.begin('adopted from a previous agent');
    return runner.snapshot();
  }

  /** Agent shutdown: stops timers, probes, waits and followers. Never signals an engine. */
  close(): void {
    if (this.closing.signal.aborted) return;
    this.closing.abort(failure('the supervisor is closed'));
    clearInterval(this.logTimer);
    for (const r of this.runners.values()) r.detach();
  }
}
