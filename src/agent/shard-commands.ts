import { clone, create } from '@bufbuild/protobuf';
import { durationMs } from '@bufbuild/protobuf/wkt';
import { type Inventory, ShardState, type ShardStatus, ShardStatusSchema, type StartShard, StartShardSchema, type StopShard } from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure } from '../lib/errors.js';
import { foreignMemoryProblem } from '../lib/foreign-memory-problem.js';
import type { Logger } from '../lib/logger.js';
import { RateLimitedLog } from '../lib/rate-limited-log.js';
import { readProcStat } from '../lib/process/proc-stat.js';
import { assertShardId, isValidShardId } from '../lib/shard-id.js';
import { isTerminal } from '../lib/shard-states.js';
import type { ValidationContext } from './engines/engine.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import { isPortFree } from './engines/is-port-free.js';
import { WORKER_PORT_FIRST, WORKER_PORT_LAST, chooseWorkerPort } from './engines/choose-worker-port.js';
import { readEphemeralPortRange } from '../lib/ephemeral-port-range.js';
import { refusedStatus, statusFromSnapshot } from './connection/shard-report.js';
import { RepeatedStartError, type ShardSnapshot, type Supervisor } from './supervisor/supervisor.js';

export interface ShardCommandsOptions {
  nodeId: string;
  supervisor: Supervisor;
  engines: EngineRegistry;
  /** The node's hardware as last read: what validation judges a shard against. */
  inventory: () => Inventory;
  /** The fault of a GPU ("GPU 3: Xid 79: ..."), from the health watch; undefined when it is sound. */
  gpuFault?: (gpuIndex: number) => string | undefined;
  /** discovery.foreign_memory_share: a GPU with more memory used by no listed process is refused. */
  foreignMemoryShare?: number;
  /** Sends a status to the control plane now, or after the next Register. */
  report: (status: ShardStatus) => void;
  logger: Logger;
}

/**
 * StartShard, StopShard and DrainShard, from the control plane or an
 * operator: the shard id is validated once here, then the supervisor's
 * registry does the rest. Every outcome is reported; nothing here throws at
 * the stream.
 */
export class ShardCommands {
  private readonly sup: Supervisor;
  private readonly log: Logger;
  /** Refusals are logged a few times, not once per message: a flooding control plane must not fill the journal. */
  private readonly refusals: RateLimitedLog;
  /** Stops in progress, by shard id. */
  private readonly stopping = new Map<string, Promise<void>>();

  constructor(private readonly opts: ShardCommandsOptions) {
    this.sup = opts.supervisor;
    this.log = opts.logger;
    this.refusals = new RateLimitedLog(opts.logger);
  }

  /**
   * Validates, launches, and waits for a shard to serve. Idempotent by shard
   * id (the registry's one check): the control plane retries, and a repeat
   * must never make a second process, so it only reports the current state.
   */
  async start(given: StartShard): Promise<void> {
    const id = given.shardId;
    let spec = given;
    const { nodeId, report } = this.opts;
    // The id is validated once, by the registry's reservation: an invalid one
    // is refused there, before anything is validated or launched.
    let started: { shard: ShardSnapshot; created: boolean };
    try {
      // A faulty GPU is named before the registry's "held by shard X", which
      // would hide the cause; a repeat of a shard already here is not judged
      // (it reports its state, whatever its GPU does now).
      const known = this.sup.get(id);
      if (!known || isTerminal(known.state)) {
        this.refuseUnfitGpus(spec);
        spec = await this.withWorkerPort(spec);
      }
      started = await this.sup.start(spec, async () => {
        const engine = this.opts.engines.get(spec.profile?.engine ?? '');
        // Validate before launching: an engine that refuses a profile does so
        // after minutes of model loading; here it costs nothing.
        await engine.validate(spec, this.validationContext(id));
        const plan = engine.command(spec);
        return { plan, servesHttp: engine.servesHttp(spec), watch: engine.watch(spec, plan) };
      });
    } catch (err) {
      if (err instanceof RepeatedStartError) return;
      this.refusals.warn({ shard: id, replica: spec.replicaId, err: errorMessage(err) }, 'refused to start a shard');
      report(refusedStatus(nodeId, spec, errorMessage(err)));
      return;
    }
    if (!started.created) {
      // Rate-limited: a flood of repeats of a running shard's start is read at full speed, each coalesced in the outbox.
      this.refusals.info({ shard: id, replica: spec.replicaId }, 'start repeated for a shard that is already here; reporting its state');
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

  /**
   * The spec with a port for a worker rank that listens and was given none
   * (chooseWorkerPort); the spec itself otherwise. Chosen before the start
   * is admitted, so the registry reserves it; a start racing this one for
   * the same port is refused by that reservation and retried by its
   * control plane.
   */
  private async withWorkerPort(spec: StartShard): Promise<StartShard> {
    if (spec.httpPort !== 0 || !isValidShardId(spec.shardId)) return spec;
    const engine = this.opts.engines.get(spec.profile?.engine ?? '');
    if (!engine.workerListens(spec)) return spec;
    const port = await chooseWorkerPort(this.sup.reservations(spec.shardId).ports, isPortFree, await readEphemeralPortRange());
    if (port === undefined) throw failure(`no free port in ${WORKER_PORT_FIRST}-${WORKER_PORT_LAST} for worker rank ${spec.rank}'s /health; give the shard an http_port`);
    this.log.info({ shard: spec.shardId, replica: spec.replicaId, port }, 'chose a port for a worker rank\'s /health');
    const chosen = clone(StartShardSchema, spec);
    chosen.httpPort = port;
    return chosen;
  }

  /**
   * GPUs no engine should be put on, whatever the engine: one with a fault
   * (checked before "held by", which would name the shard and hide the
   * cause), and one whose memory is used by something this node cannot see
   * (the engine would run out of memory minutes into loading).
   */
  private refuseUnfitGpus(spec: StartShard): void {
    const inventory = this.opts.inventory();
    for (const i of spec.gpuIndices) {
      const fault = this.opts.gpuFault?.(i);
      if (fault !== undefined) throw failure(`${fault}; no shard starts on it until the fault clears (a lost GPU needs a reset)`);
      const gpu = inventory.gpus.find((g) => g.index === i);
      const foreign = gpu && foreignMemoryProblem(gpu, inventory.processes, this.opts.foreignMemoryShare);
      if (foreign) throw failure(foreign);
    }
  }

  private validationContext(shardId: string): ValidationContext {
    const inventory = this.opts.inventory();
    // The registry's reservations, the same ones its synchronous reserve()
    // step refused against: a second list built here from snapshots would
    // miss the launches still in progress.
    const heldGpus = this.sup.reservations(shardId).gpus;
    const holding = this.sup.list().filter((s) => !isTerminal(s.state) || s.running);
    const shardGroups = new Set(holding.map((s) => s.pid));
    // A compute process is ours when it is in the process group of one of our
    // engines (the GPU is usually held by a worker child, not the pid we started).
    const foreignProcesses = inventory.processes.filter((p) => {
      const stat = readProcStat(p.pid);
      return !(stat && shardGroups.has(stat.pgrp)) && !shardGroups.has(p.pid);
    });
    return { inventory, heldGpus, foreignProcesses, isPortFree: (port) => isPortFree(port), agentUid: process.getuid?.() ?? -1 };
  }

  /** Stops a shard: every process of it gone, then STOPPED is reported and its state forgotten. */
  async stop(m: Pick<StopShard, 'shardId' | 'grace'>): Promise<void> {
    const id = m.shardId;
    const { nodeId, report } = this.opts;
    if (!isValidShardId(id)) {
      report(refusedStatus(nodeId, { shardId: id, replicaId: '' }, `stop refused: invalid shard id ${quoteId(id)}`));
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

  private async stopOnce(id: string, grace: StopShard['grace']): Promise<void> {
    const { nodeId, report } = this.opts;
    // A start still validating or launching finishes first, so that a stop
    // never races it and leaves an engine behind.
    await this.sup.launchSettled(id);
    const shard = this.sup.get(id);
    if (!shard) {
      // Nothing runs under that id: report it stopped, which is the truth.
      report(create(ShardStatusSchema, { nodeId, shardId: id, state: ShardState.STOPPED }));
      return;
    }
    try {
      const after = await this.sup.stop(id, { graceMs: grace ? durationMs(grace) : undefined });
      this.sup.remove(id);
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
  drain(id: string): Promise<ShardSnapshot> {
    assertShardId(id);
    const shard = this.sup.get(id);
    if (!shard || isTerminal(shard.state)) throw failure(`no running shard ${JSON.stringify(id)} on this node`);
    return this.sup.drain(id);
  }

  /**
   * `ctl drain --cancel`: DRAINING → READY, reported through the transition
   * so the control plane routes to the shard again. Throws when the shard
   * is not DRAINING.
   */
  cancelDrain(id: string): Promise<ShardSnapshot> {
    assertShardId(id);
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
    try {
      await this.drain(id);
    } catch (err) {
      const { nodeId, report } = this.opts;
      const why = `drain refused: ${errorMessage(err)}`;
      const shard = isValidShardId(id) ? this.sup.get(id) : undefined;
      this.refusals.warn({ shard: id, err: why }, 'refused a drain');
      if (shard && !isTerminal(shard.state)) report(create(ShardStatusSchema, { ...statusFromSnapshot(nodeId, shard), error: why }));
      else report(refusedStatus(nodeId, { shardId: id, replicaId: shard?.replicaId ?? '' }, why));
    }
  }
}

/** An untrusted id as it may appear in a report: quoted, and cut short. */
function quoteId(id: string): string {
  return JSON.stringify(String(id).slice(0, 40));
}
