import type { SleepProbes } from './shard/shard-sleep.js';
import { EventEmitter } from 'node:events';
import { existsSync, unlinkSync } from 'node:fs';
import type { SupervisorConfig } from '../config/agent-config.js';
import { isNotFound } from '../../lib/errno.js';
import { errorMessage, failure } from '../../lib/errors.js';
import { followFile } from '../../lib/files/follow-file.js';
import { tailFile, tailLines } from '../../lib/files/tail-file.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import type { Orphan } from '../../lib/process/orphan.js';
import { type EngineUids, agentUids } from '../../lib/process/process-table.js';
import type { CheckedStartShard, ShardId } from '../../lib/shard-id.js';
import { previousRunLogPath, shardLogPath } from '../../lib/shard-layout.js';
import { isTerminal } from '../../lib/shard-states.js';
import { type LauncherChoice, chooseLauncher } from './launch/choose-launcher.js';
import { findOrphans } from './orphans/find-orphans.js';
import { type KillOrphanOptions, killOrphan } from './orphans/kill-orphan.js';
import { LaunchAdmission, type LaunchAdmissionOptions, type Reservations } from './launch-admission.js';
import { type ShardFileOwnership, type ShardLaunch, launchShard, shardEnvFilePath } from './launch/launch-shard.js';
import type { OrphanContext } from './orphans/find-orphans.js';
import { endedShard, reattachShard } from './orphans/reattach-shard.js';
import { RepeatedStartError } from './launch-admission.js';
import type { SettleOptions } from './shard/shard-settle.js';
import type { ShardReaction } from './shard/shard-reaction.js';
import { ShardRunner } from './shard/shard-runner.js';
import type { ShardRunnerContext } from './shard/shard-runner-context.js';
import { ShardLogHousekeeping } from './shard-log-housekeeping.js';
import type { ShardSnapshot, ShardTransition } from './shard/shard-snapshot.js';
import type { GangFault } from './shard/shard-machine.js';
import { stateName } from '../../lib/shard-states.js';
import { TerminalShardGc } from './terminal-shard-gc.js';

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
  /** How often supervisor.terminal_retention is checked; default TERMINAL_GC_INTERVAL_MS (30 s). */
  terminalGcIntervalMs?: number;
  /** The ports of this node a shard's engine binds, all held for it (LaunchAdmissionOptions.boundPorts); its http_port alone by default. */
  boundPorts?: LaunchAdmissionOptions['boundPorts'];
  /** Which peer rank went first when a gang rank's engine ends (ShardRunnerContext.firstToGo); none: not asked. */
  firstToGo?: ShardRunnerContext['firstToGo'];
  /** The node's known answers by model content (ShardRunnerContext.knownAnswers); none: starts are not checked. */
  knownAnswers?: ShardRunnerContext['knownAnswers'];
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
export class Supervisor extends EventEmitter<{ transition: [ShardTransition]; status: [ShardSnapshot] }> {
  private readonly config: SupervisorConfig;
  private readonly log: Logger;
  private readonly ctx: ShardRunnerContext;
  private readonly runners = new Map<string, ShardRunner>();
  private readonly admission: LaunchAdmission;
  private readonly files: ShardFileOwnership;
  private readonly orphans: OrphanContext;
  /** Aborted by close(): ends launches in progress, touches no engine. */
  private readonly closing = new AbortController();
  private readonly logs: ShardLogHousekeeping;
  private launcherChoice: Promise<LauncherChoice> | undefined;
  /** When terminal shards ended, and their collection (collectTerminalShards). */
  private readonly gc: TerminalShardGc;
  /** What follows each transition, in order (react). */
  private readonly reactions: ShardReaction[] = [];

  constructor(opts: SupervisorOptions) {
    super();
    this.config = opts.config;
    this.log = opts.logger ?? silentLogger;
    this.ctx = { config: this.config, log: this.log, onTransition: (t) => this.onTransition(t), onStatus: (s) => this.emit('status', s), launcher: () => this.launcher(), firstToGo: opts.firstToGo, knownAnswers: opts.knownAnswers };
    const { maxConcurrentLaunches, maxPendingLaunches, logCheckIntervalMs, logPruneIntervalMs } = opts;
    this.admission = new LaunchAdmission({ runners: this.runners, closed: this.closing.signal, maxConcurrentLaunches, maxPendingLaunches, boundPorts: opts.boundPorts });
    this.files = { engineUids: opts.engineUids ?? agentUids(), logGid: opts.logGid };
    this.orphans = { config: this.config, log: this.log, engineUids: this.files.engineUids, signalOrphanGroup: opts.signalOrphanGroup };
    const isClaimed = (id: string) => this.admission.isClaimed(id);
    const { config, log, engineUids } = this.orphans;
    this.logs = new ShardLogHousekeeping({ config, log, engineUids, runners: this.runners, isClaimed, logCheckIntervalMs, logPruneIntervalMs });
    const remove = (id: ShardId) => this.remove(id);
    this.gc = new TerminalShardGc({ config, log, runners: this.runners, isClaimed, remove, closed: this.closing.signal, intervalMs: opts.terminalGcIntervalMs });
  }

  /** Adds a reaction to every shard transition, run after those added before it (ShardReaction). */
  react(reaction: ShardReaction): void {
    this.reactions.push(reaction);
  }

  private onTransition(t: ShardTransition): void {
    const id = t.shard.shardId;
    if (isTerminal(t.to)) this.gc.ended(id, Date.now());
    else this.gc.alive(id);
    for (const r of this.reactions) {
      try {
        r.on(t);
      } catch (err) {
        // One reaction's bug must not cost the others theirs (a status unreported, a model left pinned).
        this.log.error({ shard: id, reaction: r.name, err: errorMessage(err) }, 'a shard reaction threw');
      }
    }
    this.emit('transition', t);
    // After the listeners: whoever reports this end has read the shard first.
    if (isTerminal(t.to)) setImmediate(() => this.collectTerminalShards());
  }

  /**
   * Forgets terminal shards (their runner and state file; logs stay for the
   * log retention) beyond supervisor.keep_terminal_shards or ended longer
   * than supervisor.terminal_retention ago: a crash loop's generations piled
   * up in ctl status and the state directory for ever (walkthrough 2, row 6).
   * Never one whose engine may still run (it holds its GPUs), nor one being
   * started again. Returns the ids forgotten.
   */
  collectTerminalShards(nowMs = Date.now()): string[] {
    return this.gc.collect(nowMs);
  }

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
  async start(spec: CheckedStartShard, source: LaunchSource): Promise<{ shard: ShardSnapshot; created: boolean }> {
    const reserved = this.admission.reserve(spec, (existing) => this.launch(spec, source, existing));
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
      this.admission.release(id, settled);
    }
  }

  /** GPUs and ports held by shards other than `exceptShardId` (LaunchAdmission.reservations). */
  reservations(exceptShardId = ''): Reservations {
    return this.admission.reservations(exceptShardId);
  }

  private async launch(spec: CheckedStartShard, source: LaunchSource, previous: ShardRunner | undefined): Promise<ShardRunner> {
    await this.admission.takeSlot();
    try {
      if (this.closing.signal.aborted) throw failure('the supervisor is closed');
      const launch = typeof source === 'function' ? await source() : source;
      if (this.closing.signal.aborted) throw failure('the supervisor is closed');
      const runner = new ShardRunner(this.ctx, await launchShard(this.ctx, spec, launch, previous, this.closing.signal, this.files), previous?.currentState);
      this.runners.set(spec.shardId, runner);
      runner.begin(previous ? `relaunched after ${stateName(previous.currentState)}` : 'launched');
      return runner;
    } finally {
      this.admission.releaseSlot();
    }
  }

  /** Resolves once a start of `shardId` in progress has launched or been refused, so that a stop never races it. */
  async launchSettled(shardId: ShardId): Promise<void> {
    await this.admission.pending(shardId);
  }

  /** Brings a launched or adopted shard to READY (see ShardRunner.settle); throws ShardFailedError when it cannot. */
  settle(shardId: ShardId, opts: SettleOptions): Promise<void> {
    return this.mustGet(shardId).settle(opts);
  }

  /** supervisor.log_dir: logs outlive their shards (ctl logs of a crashed generation). */
  get logDir(): string {
    return this.config.logDir;
  }

  /** supervisor.state_dir. */
  get stateDir(): string {
    return this.config.stateDir;
  }

  get(shardId: ShardId): ShardSnapshot | undefined {
    return this.runners.get(shardId)?.snapshot();
  }

  list(): ShardSnapshot[] {
    return [...this.runners.values()].map((r) => r.snapshot());
  }

  /**
   * The ranks of multi-node replicas (nnodes > 1), the only shards the gang
   * watch looks at: it asks every second, and a snapshot of every shard of
   * a node without gangs each time was a quarter of an idle agent's
   * allocation (bench 5b), growing with the shards.
   */
  listGangRanks(): ShardSnapshot[] {
    const ranks: ShardSnapshot[] = [];
    for (const r of this.runners.values()) if (r.spec.nnodes > 1) ranks.push(r.snapshot());
    return ranks;
  }

  private mustGet(shardId: ShardId): ShardRunner {
    const runner = this.runners.get(shardId);
    if (!runner) throw failure(`no shard ${shardId} is supervised here`);
    return runner;
  }

  stop(shardId: ShardId, opts: { graceMs?: number; signal?: AbortSignal } = {}): Promise<ShardSnapshot> {
    return this.mustGet(shardId).stop(opts);
  }

  drain(shardId: ShardId): Promise<ShardSnapshot> {
    return this.mustGet(shardId).drain();
  }

  cancelDrain(shardId: ShardId): Promise<ShardSnapshot> {
    return this.mustGet(shardId).cancelDrain();
  }

  /** READY → SLEEPING (ShardRunner.sleep); throws a one-line refusal. */
  sleep(shardId: ShardId, level: number, probes: SleepProbes): Promise<ShardSnapshot> {
    return this.mustGet(shardId).sleep(level, probes);
  }

  /** SLEEPING → READY (ShardRunner.wake); throws a one-line refusal. */
  wake(shardId: ShardId, probes: SleepProbes): Promise<ShardSnapshot> {
    return this.mustGet(shardId).wake(probes);
  }

  /** The shards whose GPUs include `gpuIndex`. */
  shardsOnGpu(gpuIndex: number): ShardSnapshot[] {
    return [...this.runners.values()].filter((r) => r.spec.gpuIndices.includes(gpuIndex)).map((r) => r.snapshot());
  }

  /**
   * GPU `gpuIndex` became faulty or sound: every shard on it is marked with
   * the faults of all its GPUs (describeFault; ShardRunner.markGpuFault), or
   * cleared once none has one. Engines are left running: the control plane
   * decides what to do with them.
   */
  gpuHealthChanged(gpuIndex: number, describeFault: (gpuIndex: number) => string | undefined): void {
    for (const runner of this.runners.values()) {
      if (!runner.spec.gpuIndices.includes(gpuIndex)) continue;
      const faults = runner.spec.gpuIndices.map(describeFault).filter((f) => f !== undefined);
      if (faults.length === 0) runner.clearGpuFault();
      else runner.markGpuFault(faults.join('; '));
    }
  }

  /** What the gang watch saw of a shard's peer ranks (gang-watch.ts): a break, a stall, or (undefined) a whole gang. */
  gangChanged(shardId: ShardId, fault: GangFault | undefined): void {
    this.runners.get(shardId)?.markGang(fault);
  }

  /** Requests the engine is working on, from its metrics gauge; undefined when it cannot tell. */
  inFlight(shardId: ShardId): Promise<number | undefined> {
    return this.mustGet(shardId).inFlight();
  }

  remove(shardId: ShardId): void {
    const runner = this.mustGet(shardId);
    if (!isTerminal(runner.currentState)) {
      throw failure(`shard ${shardId} is ${stateName(runner.currentState)}: stop it before removing it`);
    }
    runner.detach('stopped');
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

  /** The last lines of a shard's log (also of one no longer supervised); none when there is no log. */
  async tailLog(shardId: ShardId, lines: number): Promise<string[]> {
    return tailFile(shardLogPath(this.config.logDir, shardId), lines);
  }

  /**
   * tailLog streamed, a chunk's lines at a time, for a client that reads
   * many: what it holds stays one chunk however many lines are asked for, and
   * `signal` (the client leaving) stops the read.
   */
  logLines(shardId: ShardId, lines: number, signal: AbortSignal): AsyncIterable<string[]> {
    return tailLines(shardLogPath(this.config.logDir, shardId), lines, { signal });
  }

  /** The run before the current one (see keepPreviousRun) streamed, as logLines; undefined when none is kept. */
  previousLogLines(shardId: ShardId, lines: number, signal: AbortSignal): AsyncIterable<string[]> | undefined {
    const path = previousRunLogPath(this.config.logDir, shardId, 1);
    if (!existsSync(path)) return undefined;
    return tailLines(path, lines, { signal });
  }

  /**
   * New log lines as they are written, across rotation, after the last
   * `backlogLines` already written (the batches before the first empty one,
   * see followFile); ends when the shard is removed, on `signal`, or on
   * close().
   */
  async *followLog(shardId: ShardId, signal: AbortSignal, backlogLines = 0): AsyncIterable<string[]> {
    const runner = this.mustGet(shardId);
    yield* followFile(runner.logPath, {
      backlogLines,
      signal: AbortSignal.any([signal, this.closing.signal]),
      isDone: () => this.runners.get(shardId) !== runner || this.closing.signal.aborted,
    });
  }

  /** Removes logs of shards no longer here (ShardLogHousekeeping.pruneLogs); returns the file names removed. */
  pruneLogs(): Promise<string[]> {
    return this.logs.pruneLogs();
  }

  /** Shards this instance does not supervise but a previous agent left behind (see findOrphans). */
  findOrphans(): Promise<Orphan[]> {
    return findOrphans(this.orphans, (id) => this.runners.has(id));
  }

  /** Ends an engine a previous agent left, never one supervised here (see killOrphan); an ended shard kept (keepEnded) has none. */
  async killOrphan(o: Orphan, opts: KillOrphanOptions = {}): Promise<void> {
    if (this.runners.get(o.shardId)?.running) throw failure(`shard ${o.shardId} is supervised here; stop it instead`);
    await killOrphan(this.orphans, o, opts);
  }

  /** Takes over an identified, live engine as a shard in STARTING; the caller settles it like a fresh start, with its own timeout. */
  adopt(o: Orphan): ShardSnapshot {
    const existing = this.runners.get(o.shardId);
    if (existing && !isTerminal(existing.currentState)) throw failure(`shard ${o.shardId} is already supervised here`);
    const runner = reattachShard(this.ctx, o, existing);
    existing?.detach('replaced');
    this.runners.set(o.shardId, runner);
    runner.begin('adopted from a previous agent');
    return runner.snapshot();
  }

  /** Keeps a shard whose engine ended before this agent as FAILED (endedShard) with its state file, collected as any ended shard; false when not kept. */
  keepEnded(o: Orphan, why: string): boolean {
    if (this.runners.has(o.shardId)) return false;
    const { runner, endedAtMs } = endedShard(this.ctx, o, why);
    this.runners.set(o.shardId, runner);
    this.gc.ended(o.shardId, endedAtMs);
    return true;
  }

  /** Agent shutdown: stops timers, probes, waits and followers. Never signals an engine. Resolves once no state file is being written. */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort(failure('the supervisor is closed'));
    this.logs.close();
    this.gc.close();
    this.admission.wakeAll();
    await Promise.all([...[...this.runners.values()].map((r) => r.detach('agent-closing')), this.ctx.knownAnswers?.close()]);
  }
}
