import { ModelPullState, type AgentMessage, type GpuEvent, type ModelPull, type ShardStatus } from '../../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../../lib/logger.js';
import { isTerminal, isTrouble, isUnplannedEnd, stateName } from '../../lib/shard-states.js';
import type { ReporterMetrics } from './connection-metrics.js';
import type { Outbox } from './outbox.js';
import { statusFromSnapshot } from './shard-report.js';
import type { ShardSnapshot, ShardTransition } from '../supervisor/shard/shard-snapshot.js';
import type { Supervisor } from '../supervisor/supervisor.js';
import { cutString } from '../../lib/cut-string.js';

/** Longest shard or replica id sent back: a valid shard id has at most 128 characters. */
export const MAX_REPORTED_ID_CHARS = 256;
/** Longest error sent back; refusals quote what the control plane sent. */
export const MAX_REPORTED_ERROR_CHARS = 4096;

/**
 * GPU events kept for the control plane while no stream takes them. A
 * node's GPUs raise a handful in an outage; a flapping NVLink could raise
 * thousands, and the oldest of those matter least (the Inventory after
 * Register carries each GPU's health now).
 */
export const MAX_KEPT_GPU_EVENTS = 256;

export interface StatusReporterOptions {
  nodeId: string;
  metrics?: ReporterMetrics;
  /** Default MAX_KEPT_GPU_EVENTS. */
  maxKeptGpuEvents?: number;
  logger?: Logger;
  /** What every shard status carries beside the runner's (its LoRA adapters, issue 53); none: as it is. */
  decorate?: (status: ShardStatus) => ShardStatus;
}

/** A GPU event on its way: kept until a stream known to work has taken it. */
interface KeptGpuEvent {
  event: GpuEvent;
  /** The outbox of the session it was last handed to, once that outbox has taken it. */
  takenBy?: Outbox;
}

/**
 * What the agent tells the control plane between Registers: shard statuses
 * and other messages, on the session's stream while there is one.
 *
 * While no stream is open, the latest status of each shard is kept (an older
 * one is superseded by the next). Once the next session has queued Register,
 * the terminal ones are sent; the others are already in Register's running
 * shards. Register lists only what runs, so without the terminal ones a
 * control plane would never learn why a shard vanished from the list. An
 * UNHEALTHY one with its cause is sent too: Register's running shards carry
 * the state but not the error, and "GPU 3: Xid 79" decides what the control
 * plane does with the replica.
 */
export class StatusReporter {
  private outbox: Outbox | undefined;
  /**
   * Whether the open session's stream is known to work. Until it is, what is
   * sent on it is also kept: a session is opened (Register queued) before the
   * dial, and a status flushed into one whose dial is then refused was lost.
   */
  private established = false;
  private readonly unsent = new Map<string, ShardStatus>();
  /**
   * The outcome (DONE or FAILED) of each pull, by repo@revision, until a
   * stream known to work has taken it. A pull outlives the stream that asked
   * for it, and its outcome is the only answer a PrefetchModel gets: the
   * Inventory after Register lists a DONE model, but a FAILED one is only
   * in this message. Progress on the way is not kept: the next says more.
   */
  private readonly unsentPulls = new Map<string, ModelPull>();
  private readonly gpuEvents: KeptGpuEvent[] = [];
  /** GPU events dropped because MAX_KEPT_GPU_EVENTS were kept, since the last ones went out. */
  private droppedGpuEvents = 0;

  constructor(private readonly opts: StatusReporterOptions) {}

  /** GPU events not yet taken by an established stream, oldest first. */
  get pendingGpuEvents(): readonly GpuEvent[] {
    return this.gpuEvents.map((k) => k.event);
  }

  /** Statuses kept while disconnected, latest per shard. */
  get pending(): readonly ShardStatus[] {
    return [...this.unsent.values()];
  }

  /** A session has queued Register on `outbox`: what was kept goes after it. */
  onSessionOpen(outbox: Outbox): void {
    this.outbox = outbox;
    this.established = false;
    for (const [id, status] of this.unsent) {
      // Terminal ones, and a troubled one (UNHEALTHY) with its cause: Register lists the state but not why.
      if (isTerminal(status.state) || (isTrouble(status.state) && status.error !== '')) this.send({ case: 'shard', value: status });
      // A running shard's state is in the Register just queued.
      else this.unsent.delete(id);
    }
    if (this.droppedGpuEvents > 0) {
      this.opts.logger?.warn(
        { dropped: this.droppedGpuEvents, kept: this.gpuEvents.length },
        'GPU events dropped while the control plane was unreachable: only the latest are sent; the Inventory carries each GPU\'s health now',
      );
      this.droppedGpuEvents = 0;
    }
    for (const pull of this.unsentPulls.values()) this.send({ case: 'modelPull', value: pull });
    for (const kept of this.gpuEvents) {
      kept.takenBy = undefined;
      this.sendGpuEvent(kept, outbox);
    }
  }

  /** The stream works: what was kept for it has been handed to it. */
  onSessionEstablished(): void {
    this.established = true;
    this.unsent.clear();
    this.unsentPulls.clear();
    this.forgetTakenGpuEvents();
  }

  /** The session's stream is gone: reports are kept until the next one. */
  onSessionClosed(): void {
    this.outbox = undefined;
    this.established = false;
  }

  /**
   * Sends on the open stream; without one the message is dropped, for what
   * it says is in the next Register (inventory) or kept by report().
   */
  send(msg: AgentMessage['msg']): void {
    // A failed write needs no handling here: the session ends with the
    // stream's error, and the next Register carries what matters.
    this.outbox?.send(msg).catch(() => {});
  }

  /** A GPU event: sent now when a stream is open, and kept until a stream known to work has taken it. */
  gpuEvent(event: GpuEvent): void {
    const kept: KeptGpuEvent = { event };
    this.gpuEvents.push(kept);
    if (this.gpuEvents.length > (this.opts.maxKeptGpuEvents ?? MAX_KEPT_GPU_EVENTS)) {
      this.gpuEvents.shift();
      this.droppedGpuEvents += 1;
    }
    if (this.outbox) this.sendGpuEvent(kept, this.outbox);
  }

  private sendGpuEvent(kept: KeptGpuEvent, outbox: Outbox): void {
    outbox.send({ case: 'gpuEvent', value: kept.event }).then(
      () => {
        if (this.outbox !== outbox) return;
        kept.takenBy = outbox;
        if (this.established) this.forgetTakenGpuEvents();
      },
      // Kept: the next session's Register is followed by it.
      () => {},
    );
  }

  /** Drops the events the open, established session's outbox has taken; the rest keep their order. */
  private forgetTakenGpuEvents(): void {
    const outbox = this.outbox;
    if (!outbox) return;
    for (let i = this.gpuEvents.length - 1; i >= 0; i--) {
      if (this.gpuEvents[i]?.takenBy === outbox) this.gpuEvents.splice(i, 1);
    }
  }

  /** Pull outcomes kept for the next stream, latest per model. */
  get pendingModelPulls(): readonly ModelPull[] {
    return [...this.unsentPulls.values()];
  }

  /** A step of a model pull: sent now when a stream is open; its outcome is kept until a stream known to work has it. */
  modelPull(pull: ModelPull): void {
    if (this.outbox) this.send({ case: 'modelPull', value: pull });
    const ended = pull.state === ModelPullState.DONE || pull.state === ModelPullState.FAILED || pull.state === ModelPullState.WARMED;
    const key = `${pull.repo}@${pull.revision}`;
    if (ended && (!this.outbox || !this.established)) this.unsentPulls.set(key, pull);
    // A new pull of the same model makes the kept outcome of the last one stale.
    else if (!ended) this.unsentPulls.delete(key);
  }

  report(reported: ShardStatus): void {
    const status = boundedStatus(this.opts.decorate?.(reported) ?? reported);
    if (this.outbox) this.send({ case: 'shard', value: status });
    if (!this.outbox || !this.established) this.unsent.set(status.shardId, status);
  }

  /** Reports every transition of the supervisor's shards, and every other change of what a status says. */
  follow(supervisor: Supervisor): void {
    supervisor.react({ name: 'status reported', on: (t) => this.onTransition(t) });
    supervisor.on('status', (s) => this.onStatus(s));
  }

  /** A supervisor transition, reported as the shard's status. */
  onTransition(t: ShardTransition): void {
    if (isUnplannedEnd(t.to)) this.opts.metrics?.engineExits.inc({ state: stateName(t.to) });
    this.report(statusFromSnapshot(this.opts.nodeId, t.shard));
  }

  /** The shard's status changed in its state (a STARTING shard's port squatted, then freed). */
  onStatus(shard: ShardSnapshot): void {
    this.report(statusFromSnapshot(this.opts.nodeId, shard));
  }
}

/**
 * A status whose strings fit a message of a few KiB. A refusal echoes the id
 * and text of the command it refuses, and a control message may be 16 MiB:
 * 60 drains of 4 MB invalid ids held 570 MB in the outbox, whose cap counts
 * messages, not bytes (finding 6, control-plane-flood.test.ts). A valid id is
 * never cut; two invalid ones cut to the same prefix coalesce, which is fine.
 */
function boundedStatus(status: ShardStatus): ShardStatus {
  const { shardId, replicaId, error } = status;
  if (shardId.length <= MAX_REPORTED_ID_CHARS && replicaId.length <= MAX_REPORTED_ID_CHARS && error.length <= MAX_REPORTED_ERROR_CHARS) return status;
  return {
    ...status,
    shardId: cutString(shardId, MAX_REPORTED_ID_CHARS),
    replicaId: cutString(replicaId, MAX_REPORTED_ID_CHARS),
    error: cutString(error, MAX_REPORTED_ERROR_CHARS),
  };
}

