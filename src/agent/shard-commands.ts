import { create } from '@bufbuild/protobuf';
import { durationMs } from '@bufbuild/protobuf/wkt';
import { type SleepShard, ShardState, type ShardStatus, ShardStatusSchema, type StartShard, type StopShard, type WakeShard } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { RateLimitedLog } from '../lib/rate-limited-log.js';
import { isValidShardId, parseShardId, parseStartShard, quoteShardId, type ShardId } from '../lib/shard-id.js';
import { isTerminal } from '../lib/shard-states.js';
import { refusedStatus, statusFromSnapshot } from './connection/shard-report.js';
import { RepeatedStartError } from './supervisor/launch-admission.js';
import type { ShardSnapshot } from './supervisor/shard/shard-snapshot.js';
import type { Supervisor } from './supervisor/supervisor.js';
import { type NodeModels, StartCancelledError } from './models/node-models.js';
import type { StartAdmission } from './start-admission.js';
import type { SleepProbes } from './supervisor/shard/shard-sleep.js';

/** What a sleep or wake came to: the shard after it, or the one-line refusal. */
export type SleepOutcome = { shard: ShardSnapshot } | { refused: string };

export interface ShardCommandsOptions {
  nodeId: string;
  supervisor: Supervisor;
  /** Judges every start: the one room where it is admitted or refused. */
  admission: StartAdmission;
  /** Sends a status to the control plane now, or after the next Register. */
  report: (status: ShardStatus) => void;
  logger: Logger;
  /** The node's model store: a shard's pin is let go when it is removed or its start refused. */
  models?: NodeModels;
  /** Told of each start or drain refused, with why (`ctl events`); unlike the log, not rate-limited, since the ring is bounded. */
  onRefused?: (what: 'start' | 'drain' | 'sleep' | 'wake', shard: { shardId: string; replicaId: string }, why: string) => void;
  /** Told as a wake of a SLEEPING shard begins (WarmthLedger.wakeAsked: its time to READY is measured from here). */
  onWakeAsked?: (shard: ShardSnapshot) => void;
  /** The GPU readings and host RAM a sleep is judged by; without them SleepShard is refused. */
  sleepProbes?: SleepProbes;
}

/**
 * StartShard, StopShard and DrainShard, from the control plane: the
 * stream's edge, where the shard id is parsed once (ShardId); then
 * StartAdmission judges a start and the supervisor's registry does the
 * rest. Every outcome is reported; nothing here throws at the stream.
 */
export class ShardCommands {
  private readonly sup: Supervisor;
  private readonly log: Logger;
  /** Refusals are logged a few times, not once per message: a flooding control plane must not fill the journal. */
  private readonly refusals: RateLimitedLog;
  /** Stops in progress, by shard id. */
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly admission: StartAdmission;

  constructor(private readonly opts: ShardCommandsOptions) {
    this.sup = opts.supervisor;
    this.log = opts.logger;
    this.refusals = new RateLimitedLog(opts.logger);
    this.admission = opts.admission;
  }

  /**
   * Validates, launches, and waits for a shard to serve. Idempotent by shard
   * id (the registry's one check): the control plane retries, and a repeat
   * must never make a second process, so it only reports the current state.
   */
  async start(given: StartShard): Promise<void> {
    const { nodeId, report } = this.opts;
    let spec = given;
    let started: { shard: ShardSnapshot; created: boolean };
    try {
      // The stream's edge: the id names files, and is checked here once.
      const admitted = await this.admission.admit(parseStartShard(given));
      spec = admitted.spec;
      started = await this.sup.start(admitted.spec, admitted.launch);
    } catch (err) {
      if (err instanceof RepeatedStartError) return;
      // Stopped while it waited for its model's pull: the stop reports STOPPED.
      if (err instanceof StartCancelledError) return;
      this.refusals.warn({ shard: spec.shardId, replica: spec.replicaId, err: errorMessage(err) }, 'refused to start a shard');
      report(refusedStatus(nodeId, spec, errorMessage(err)));
      this.opts.onRefused?.('start', spec, errorMessage(err));
      return;
    }
    if (!started.created) {
      // Rate-limited: a flood of repeats of a running shard's start is read at full speed, each coalesced in the outbox.
      this.refusals.info({ shard: spec.shardId, replica: spec.replicaId }, 'start repeated for a shard that is already here; reporting its state');
      report(statusFromSnapshot(nodeId, started.shard));
      return;
    }
    const timeoutMs = spec.profile?.startupTimeout ? durationMs(spec.profile.startupTimeout) : undefined;
    await this.settle(started.shard, timeoutMs);
  }

  /**
   * Brings a launched or adopted shard to READY through its runner, which
   * chooses how. Failures are reported by the runner's transitions; an
   * engine that will not answer is never killed here, because the control
   * plane owns that decision and already has a timeout for it.
   */
  async settle(shard: ShardSnapshot, timeoutMs: number | undefined): Promise<void> {
    try {
      await this.sup.settle(shard.shardId, { timeoutMs });
    } catch (err) {
      this.log.warn({ shard: shard.shardId, replica: shard.replicaId, adopted: shard.adopted, err: errorMessage(err) }, 'shard did not become ready');
    }
  }

  /** Stops a shard: every process of it gone, then STOPPED is reported and its state forgotten. */
  async stop(m: Pick<StopShard, 'shardId' | 'grace'>): Promise<void> {
    const id = m.shardId;
    const { nodeId, report } = this.opts;
    // The stream's edge: checked once, here.
    if (!isValidShardId(id)) {
      report(refusedStatus(nodeId, { shardId: id, replicaId: '' }, `stop refused: invalid shard id ${quoteShardId(id)}`));
      return;
    }
    // Repeats while a stop is in progress wait for it: each would otherwise
    // find the shard already removed by the first and report FAILED ("stop
    // failed") after its STOPPED, and log it (4,372 of 50k repeated stops;
    // finding 6, test/security/control-plane-flood.test.ts).
    const stopping = this.stopping.get(id);
    if (stopping) return stopping;
    const done = this.stopOnce(id, m.grace).finally(() => this.stopping.delete(id));
    this.stopping.set(id, done);
    return done;
  }

  private async stopOnce(id: ShardId, grace: StopShard['grace']): Promise<void> {
    const { nodeId, report } = this.opts;
    // A start still waiting for its model's pull gives up at once.
    this.opts.models?.cancelWait(id);
    // A start still validating or launching finishes first, so that a stop
    // never races it and leaves an engine behind.
    await this.sup.launchSettled(id);
    const shard = this.sup.get(id);
    if (!shard) {
      void this.opts.models?.unpin(id);
      // Nothing runs under that id: report it stopped, which is the truth.
      report(create(ShardStatusSchema, { nodeId, shardId: id, state: ShardState.STOPPED }));
      return;
    }
    try {
      const after = await this.sup.stop(id, { graceMs: grace ? durationMs(grace) : undefined });
      this.sup.remove(id);
      void this.opts.models?.unpin(id);
      // A shard already FAILED or EXITED makes no transition when stopped, but
      // the control plane waits for STOPPED before it hands out its GPUs.
      if (after.state !== ShardState.STOPPED) {
        report(create(ShardStatusSchema, { nodeId, replicaId: after.replicaId, shardId: id, state: ShardState.STOPPED, pid: after.pid }));
      }
    } catch (err) {
      this.log.error({ shard: id, err: errorMessage(err) }, 'stopping a shard failed');
      report(refusedStatus(nodeId, shard, `stop failed: ${errorMessage(err)}`));
    }
  }

  /**
   * Marks a running shard DRAINING (reported through its transition, so the
   * control plane routes elsewhere) and records it, so that it outlives an
   * agent restart. Throws when the shard cannot be drained.
   */
  drain(id: ShardId): Promise<ShardSnapshot> {
    const shard = this.sup.get(id);
    if (!shard || isTerminal(shard.state)) throw failure(`no running shard ${JSON.stringify(id)} on this node`);
    return this.sup.drain(id);
  }

  /**
   * `ctl drain --cancel`: DRAINING → READY, reported through the transition
   * so the control plane routes to the shard again. Throws when the shard
   * is not DRAINING.
   */
  cancelDrain(id: ShardId): Promise<ShardSnapshot> {
    const shard = this.sup.get(id);
    if (!shard || isTerminal(shard.state)) throw failure(`no running shard ${JSON.stringify(id)} on this node`);
    return this.sup.cancelDrain(id);
  }

  /**
   * A DrainShard from the control plane. A refusal says why in a status
   * report: FAILED for a shard that is not here, but a shard still loading is
   * reported with its own state, never as FAILED, which would get a healthy
   * engine replaced.
   */
  async drainCommand(id: string): Promise<void> {
    // The stream's edge: checked once, here.
    const checked = isValidShardId(id) ? id : undefined;
    try {
      await this.drain(parseShardId(id));
    } catch (err) {
      const { nodeId, report } = this.opts;
      const why = `drain refused: ${errorMessage(err)}`;
      const shard = checked && this.sup.get(checked);
      this.refusals.warn({ shard: id, err: why }, 'refused a drain');
      this.opts.onRefused?.('drain', { shardId: id, replicaId: shard ? shard.replicaId : '' }, errorMessage(err));
      if (shard && !isTerminal(shard.state)) report(create(ShardStatusSchema, { ...statusFromSnapshot(nodeId, shard), error: why }));
      else report(refusedStatus(nodeId, { shardId: id, replicaId: shard?.replicaId ?? '' }, why));
    }
  }

  /**
   * A SleepShard (issue 30). Every refusal is one line in the shard's status,
   * and the shard keeps its state: a bad level or a profile without
   * sleep_mode never touches the engine.
   */
  async sleepCommand(m: Pick<SleepShard, 'shardId' | 'level'>): Promise<SleepOutcome> {
    return this.sleepOrWake('sleep', m.shardId, (id, probes) => this.sup.sleep(id, m.level, probes));
  }

  /** A WakeShard: READY once the engine answers and has its GPU memory back. */
  async wakeCommand(m: Pick<WakeShard, 'shardId'>): Promise<SleepOutcome> {
    return this.sleepOrWake('wake', m.shardId, (id, probes) => this.sup.wake(id, probes));
  }

  /** The same for the control plane's message and `ctl sleep`/`ctl wake`: a refusal is reported on the stream and returned. */
  private async sleepOrWake(what: 'sleep' | 'wake', id: string, act: (id: ShardId, probes: SleepProbes) => Promise<ShardSnapshot>): Promise<SleepOutcome> {
    const { nodeId, report } = this.opts;
    const checked = isValidShardId(id) ? id : undefined;
    try {
      if (!checked) throw failure(`invalid shard id ${quoteShardId(id)}`);
      const shard = this.sup.get(checked);
      if (!shard || isTerminal(shard.state)) throw failure(`no running shard ${JSON.stringify(id)} on this node`);
      if (!this.opts.sleepProbes) throw failure('this agent reads no GPU memory');
      if (what === 'wake' && shard.state === ShardState.SLEEPING) this.opts.onWakeAsked?.(shard);
      return { shard: await act(checked, this.opts.sleepProbes) };
    } catch (err) {
      const msg = errorMessage(err);
      const why = msg.startsWith(`${what} `) ? msg : `${what} refused: ${msg}`;
      this.refusals.warn({ shard: id, err: why }, `refused or failed a ${what}`);
      const shard = checked && this.sup.get(checked);
      this.opts.onRefused?.(what, { shardId: id, replicaId: shard ? shard.replicaId : '' }, why);
      // The shard's own state with the reason: FAILED would get a healthy engine replaced.
      if (shard && !isTerminal(shard.state)) report(create(ShardStatusSchema, { ...statusFromSnapshot(nodeId, shard), error: why }));
      else report(refusedStatus(nodeId, { shardId: id, replicaId: shard?.replicaId ?? '' }, why));
      return { refused: why };
    }
  }
}
