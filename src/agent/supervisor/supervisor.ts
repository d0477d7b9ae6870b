import { EventEmitter } from 'node:events';
import { existsSync, unlinkSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { SupervisorConfig } from '../config/agent-config.js';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { isNotFound } from '../../lib/errno.js';
import { formatDuration } from '../../lib/duration.js';
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
import { type EngineUids, agentUids, findProcessesLoggingTo, findProcessesLoggingUnder } from '../../lib/process/process-table.js';
import { pruneShardLogs, shardIdOfAnyLog } from '../../lib/files/prune-shard-logs.js';
import { terminateProcessGroup } from '../../lib/process/terminate-process-group.js';
import { assertShardId } from '../../lib/shard-id.js';
import { previousRunLogPath, previousRunsDir, shardLogDir, shardLogPath, shardStatePath } from '../../lib/shard-layout.js';
import { isTerminal } from '../../lib/shard-states.js';
import { readUnitStatus } from '../../lib/systemd/read-unit-status.js';
import { type LauncherChoice, chooseLauncher } from './choose-launcher.js';
import { isSameRun } from './engine-unit.js';
import { type ShardFileOwnership, type ShardLaunch, launchShard, shardEnvFilePath } from './launch-shard.js';
import { stopEngineUnit } from './stop-engine-unit.js';
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
  /** How often logs of shards no longer here are pruned (pruneLogs); default LOG_PRUNE_INTERVAL_MS (10 min). */
  logPruneIntervalMs?: number;
  /** Most launches validating or launching at once, the rest waiting their turn; default DEFAULT_MAX_CONCURRENT_LAUNCHES (8). */
  maxConcurrentLaunches?: number;
  /** Most launches in progress, waiting ones included; a start beyond is refused. Default MAX_PENDING_LAUNCHES (64). */
  maxPendingLaunches?: number;
  /** The uids engines run as: only their processes count as a shard's log writers. Default: the agent's own uid. */
  engineUids?: EngineUids;
  /** Group of the log directory and logs (admin.group's gid); unchanged when omitted. */
  logGid?: number;
  /**
   * Sends a signal to the process group of an engine a previous agent left
   * (killOrphan); process.kill(-pgid) by default. Tests intercept SIGKILL
   * here to stand in for a process in uninterruptible sleep, which this
   * machine cannot make on demand.
   */
  signalOrphanGroup?: (pgid: number, sig: NodeJS.Signals) => void;
}

/**
 * One launch per GPU of an 8-GPU node at once; more wait their turn. Each
 * launch costs an executable lookup, a port probe and a fork: a control
 * plane sending thousands of starts must not turn them into thousands of
 * concurrent forks (finding 5 of the security review launched 20 with no
 * bound).
 */
export const DEFAULT_MAX_CONCURRENT_LAUNCHES = 8;
/**
 * Starts in progress (each holding its reservation) beyond which a start is
 * refused: far more than any node has shards, so only a flood reaches it.
 */
export const MAX_PENDING_LAUNCHES = 64;

/** How often logs of shards no longer supervised are pruned: they only grow when shards come and go. */
export const LOG_PRUNE_INTERVAL_MS = 10 * 60_000;
/** supervisor.log_retention's default: a week of evidence for an operator to look at. */
export const DEFAULT_LOG_RETENTION_MS = 168 * 3_600_000;
/** supervisor.log_retention_bytes's default. */
export const DEFAULT_LOG_RETENTION_BYTES = 1024 ** 3;

/** What shards hold exclusively, each with the id of the shard holding it. */
export interface Reservations {
  gpus: ReadonlyMap<number, string>;
  ports: ReadonlyMap<number, string>;
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
  /**
   * The specs of launches in progress, claimed in reserve() before any
   * await: what they will hold is held from that moment, not from when
   * their runner reaches the table.
   */
  private readonly claims = new Map<string, StartShard>();
  private readonly maxConcurrentLaunches: number;
  private readonly maxPendingLaunches: number;
  /** Launches past the concurrency bound, waiting for a slot, first come first served. */
  private readonly slotWaiters: (() => void)[] = [];
  private activeLaunches = 0;
  private readonly files: ShardFileOwnership;
  private readonly signalOrphanGroup: ((pgid: number, sig: NodeJS.Signals) => void) | undefined;
  /** Aborted by close(): ends launches in progress, touches no engine. */
  private readonly closing = new AbortController();
  private readonly logTimer: NodeJS.Timeout;
  private readonly pruneTimer: NodeJS.Timeout;
  private logCheckRunning = false;
  private launcherChoice: Promise<LauncherChoice> | undefined;

  constructor(opts: SupervisorOptions) {
    super();
    this.config = opts.config;
    this.log = opts.logger ?? silentLogger;
    this.ctx = { config: this.config, log: this.log, onTransition: (t) => this.emit('transition', t), launcher: () => this.launcher() };
    this.maxConcurrentLaunches = opts.maxConcurrentLaunches ?? DEFAULT_MAX_CONCURRENT_LAUNCHES;
    this.maxPendingLaunches = opts.maxPendingLaunches ?? MAX_PENDING_LAUNCHES;
    this.files = { engineUids: opts.engineUids ?? agentUids(), logGid: opts.logGid };
    this.signalOrphanGroup = opts.signalOrphanGroup;
    this.logTimer = setInterval(() => void this.checkLogs(), opts.logCheckIntervalMs ?? LOG_CHECK_INTERVAL_MS);
    this.logTimer.unref();
    this.pruneTimer = setInterval(() => {
      this.pruneLogs().catch((err: unknown) => this.log.warn({ err: errorMessage(err) }, 'pruning old shard logs failed'));
    }, opts.logPruneIntervalMs ?? LOG_PRUNE_INTERVAL_MS);
    this.pruneTimer.unref();
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
    const { launch, settled } = reserved;
    const id = spec.shardId;
    try {
      const r = await launch;
      return { shard: r.snapshot(), created: true };
    } finally {
      // Only after the runner is in the table, so that no repeat finds neither,
      // and no other start finds the GPUs free between claim and runner.
      if (this.launching.get(id) === settled) {
        this.launching.delete(id);
        this.claims.delete(id);
      }
    }
  }

  /**
   * The synchronous step before any `await` of a start: validates the id (it
   * names files), finds a shard already running or being launched, refuses
   * GPUs or a port another shard holds or is launching on, and otherwise
   * claims the id, its GPUs and its port by starting the launch. One step
   * with no await in it, so that two starts can never both pass: checked
   * across awaits, 20 concurrent starts on one GPU and one port all passed
   * and launched 20 engines (finding 5 of the security review).
   */
  private reserve(
    spec: StartShard,
    source: LaunchSource,
  ):
    | { kind: 'running'; runner: ShardRunner }
    | { kind: 'pending'; launch: Promise<ShardRunner | undefined> }
    | { kind: 'new'; launch: Promise<ShardRunner>; settled: Promise<ShardRunner | undefined> } {
    // First, before any path is built from it: "../x" names a file elsewhere.
    assertShardId(spec.shardId);
    if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    const id = spec.shardId;
    const existing = this.runners.get(id);
    if (existing && !isTerminal(existing.currentState)) return { kind: 'running', runner: existing };
    const pending = this.launching.get(id);
    if (pending) return { kind: 'pending', launch: pending };
    const held = this.reservations(id);
    for (const g of spec.gpuIndices) {
      const holder = held.gpus.get(g);
      if (holder !== undefined) throw failure(`GPU ${g} is held by shard ${holder}; stop it first or place this shard elsewhere`);
    }
    const portHolder = spec.httpPort > 0 ? held.ports.get(spec.httpPort) : undefined;
    if (portHolder !== undefined) throw failure(`http_port ${spec.httpPort} is already in use on this node by shard ${portHolder}; use another port`);
    if (this.launching.size >= this.maxPendingLaunches) {
      throw failure(`${this.launching.size} shard starts are in progress already, the most this agent takes at once; retry once some have settled`);
    }
    this.claims.set(id, spec);
    const launch = this.launch(spec, source, existing);
    // Repeats wait for this one; only its own caller hears why it was refused.
    const settled = launch.then(
      (r) => r,
      () => undefined,
    );
    this.launching.set(id, settled);
    return { kind: 'new', launch, settled };
  }

  /**
   * GPUs and ports held by shards other than `exceptShardId`: every launch in
   * progress, and every shard whose engine may still run, whatever its state
   * (a FAILED one that never became ready is left running until stopped, and
   * a second engine on its GPUs would fail after minutes of loading). Read
   * synchronously, so it agrees with reserve().
   */
  reservations(exceptShardId = ''): Reservations {
    const gpus = new Map<number, string>();
    const ports = new Map<number, string>();
    const hold = (id: string, spec: StartShard) => {
      if (id === exceptShardId) return;
      for (const g of spec.gpuIndices) gpus.set(g, id);
      if (spec.httpPort > 0) ports.set(spec.httpPort, id);
    };
    for (const r of this.runners.values()) if (!isTerminal(r.currentState) || r.running) hold(r.shardId, r.spec);
    for (const [id, spec] of this.claims) hold(id, spec);
    return { gpus, ports };
  }

  private async launch(spec: StartShard, source: LaunchSource, previous: ShardRunner | undefined): Promise<ShardRunner> {
    await this.takeLaunchSlot();
    try {
      if (this.closing.signal.aborted) throw failure('the supervisor is closed');
      const launch = typeof source === 'function' ? await source() : source;
      if (this.closing.signal.aborted) throw failure('the supervisor is closed');
      const runner = await launchShard(this.ctx, spec, launch, previous, this.closing.signal, this.files);
      this.runners.set(spec.shardId, runner);
      runner.begin(previous ? `relaunched after ${stateName(previous.currentState)}` : 'launched');
      return runner;
    } finally {
      this.activeLaunches--;
      this.slotWaiters.shift()?.();
    }
  }

  /**
   * Waits until fewer than maxConcurrentLaunches launches validate or
   * launch, and counts this one in; throws (taking nothing) once close()
   * has been called, so that no start waits for ever.
   */
  private async takeLaunchSlot(): Promise<void> {
    while (this.activeLaunches >= this.maxConcurrentLaunches) {
      await new Promise<void>((resolve) => this.slotWaiters.push(resolve));
      if (this.closing.signal.aborted) throw failure('the supervisor is closed');
    }
    this.activeLaunches++;
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
    // The environment file of a systemd-run engine holds its secrets: it goes with the shard.
    for (const file of [runner.statePath, shardEnvFilePath(this.config.stateDir, shardId)]) {
      try {
        unlinkSync(file);
      } catch (err) {
        // Same reasoning as ShardRunner.forgetStateFile: the shard is gone whatever the disk says.
        if (!isNotFound(err)) this.log.warn({ shard: shardId, file, err: errorMessage(err) }, 'shard removed but one of its files could not be');
      }
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

  /**
   * Removes logs of shards no longer here, by supervisor.log_retention and
   * log_retention_bytes (pruneShardLogs). Kept: every shard in the table or
   * being launched, every shard a state file still records (an engine a
   * previous agent left, not yet recovered) and every log an engine writes.
   * Returns the file names removed.
   */
  async pruneLogs(): Promise<string[]> {
    const dir = shardLogDir(this.config.logDir);
    const written = new Set<string>();
    for (const path of findProcessesLoggingUnder(dir, this.files.engineUids).keys()) {
      const id = shardIdOfAnyLog(path.slice(dir.length + 1));
      if (id !== undefined) written.add(id);
    }
    const recorded = new Set(findRecordedShardIds(this.config));
    const removed = await pruneShardLogs({
      dir,
      previousRunsDir: previousRunsDir(this.config.logDir),
      maxAgeMs: this.config.logRetentionMs ?? DEFAULT_LOG_RETENTION_MS,
      maxTotalBytes: this.config.logRetentionBytes ?? DEFAULT_LOG_RETENTION_BYTES,
      keep: (id) => this.runners.has(id) || this.claims.has(id) || recorded.has(id) || written.has(id),
    });
    if (removed.length > 0) this.log.info({ files: removed.length, first: removed[0] }, 'removed logs of shards no longer here');
    return removed;
  }

  // ---------------------------------------------------------------- engines a previous agent left

  /**
   * Shards this instance does not supervise but a previous agent left
   * behind, each judged alive or dead and identified or not (judgeOrphan).
   */
  async findOrphans(): Promise<Orphan[]> {
    const dirs = { ...this.config, engineUids: this.files.engineUids };
    const ids = findRecordedShardIds(dirs, (file) => this.log.warn({ file }, 'ignoring a state file whose name is not a shard id'));
    const orphans: Orphan[] = [];
    for (const id of ids.filter((id) => !this.runners.has(id))) {
      const o = judgeOrphan(dirs, id);
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
   *
   * The groups are terminated together, not one after the other, and with
   * `killWaitMs` the wait after SIGKILL is bounded: a group still running
   * then (uninterruptible sleep) is left, its state file kept, and this
   * throws saying so.
   */
  async killOrphan(o: Orphan, opts: { graceMs?: number; signal?: AbortSignal; killWaitMs?: number } = {}): Promise<void> {
    assertShardId(o.shardId);
    if (this.runners.has(o.shardId)) throw failure(`shard ${o.shardId} is supervised here; stop it instead`);
    const statePath = shardStatePath(this.config.stateDir, o.shardId);
    const logPath = shardLogPath(this.config.logDir, o.shardId);
    const graceMs = opts.graceMs ?? this.config.stopGraceMs;
    const ownGroup = readProcStat(process.pid)?.pgrp;
    const groups = new Set<number>();
    const read = await readStateFile(statePath, o.shardId);
    const unit = read.ok ? read.file.unit : undefined;
    let unitStuck = false;
    if (unit) {
      // Its cgroup first: that ends workers outside its process group too. Only the recorded run, never another unit of the name.
      const status = await readUnitStatus(unit.name).catch(() => undefined);
      if (status && isSameRun(status, unit)) {
        this.log.warn({ shard: o.shardId, unit: unit.name, reason: o.reason }, 'stopping the unit of an engine left by a previous agent');
        unitStuck = (await stopEngineUnit(unit, { graceMs, signal: opts.signal, killWaitMs: opts.killWaitMs })) === 'unkillable';
      }
    }
    if (read.ok && checkIdentity(read.file.pid, read.file.identity, read.file.pgid).alive) groups.add(read.file.pgid);
    for (const p of findProcessesLoggingTo(logPath, this.files.engineUids)) groups.add(p.pgid);
    // Never our own group: that would be the agent killing itself.
    const targets = [...groups].filter((pgid) => pgid > 1 && pgid !== ownGroup);
    const outcomes = await Promise.all(
      targets.map((pgid) => {
        this.log.warn({ shard: o.shardId, pgid, reason: o.reason }, 'killing an engine nothing can describe');
        return terminateProcessGroup({
          pgid,
          // Still ours while a member of the group writes this shard's log, or the identified leader lives.
          stillOurs: () =>
            findProcessesLoggingTo(logPath, this.files.engineUids).some((p) => p.pgid === pgid) ||
            (read.ok && read.file.pgid === pgid && checkIdentity(read.file.pid, read.file.identity, pgid).alive),
          graceMs,
          signal: opts.signal,
          killWaitMs: opts.killWaitMs,
          sendSignal: this.signalOrphanGroup,
        });
      }),
    );
    const stuck = targets.filter((_, i) => outcomes[i] === 'unkillable');
    if (unitStuck) {
      throw failure(
        `shard ${o.shardId}: unit ${unit?.name} still runs ${formatDuration(opts.killWaitMs ?? 0)} after SIGKILL (uninterruptible sleep, such as a hung GPU driver call); left running, its GPUs may still be in use: see systemctl status ${unit?.name}`,
      );
    }
    if (stuck.length > 0) {
      // The state file stays: the next recovery (or `ctl adopt`) looks again.
      throw failure(
        `shard ${o.shardId}: process group ${stuck.join(', ')} still runs ${formatDuration(opts.killWaitMs ?? 0)} after SIGKILL (uninterruptible sleep, such as a hung GPU driver call); left running, its GPUs may still be in use: see ps -o pid,stat,wchan -g ${stuck[0]}`,
      );
    }
    await removeStateFile(statePath);
    // Its systemd-run environment (secrets) goes with it, as with remove().
    await rm(shardEnvFilePath(this.config.stateDir, o.shardId), { force: true });
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
    clearInterval(this.pruneTimer);
    for (const wake of this.slotWaiters.splice(0)) wake();
    for (const r of this.runners.values()) r.detach();
  }
}
