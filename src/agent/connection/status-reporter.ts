import { ShardState, type AgentMessage, type ShardStatus } from '../../gen/llmgw/v1/agent_pb.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { AgentMetrics } from '../agent-metrics.js';
import type { Outbox } from './outbox.js';
import { statusFromSnapshot } from './shard-report.js';
import type { ShardSnapshot, ShardTransition, Supervisor } from '../supervisor/supervisor.js';

/** Longest shard or replica id sent back: a valid shard id has at most 128 characters. */
export const MAX_REPORTED_ID_CHARS = 256;
/** Longest error sent back; refusals quote what the control plane sent. */
export const MAX_REPORTED_ERROR_CHARS = 4096;

export interface StatusReporterOptions {
  nodeId: string;
  metrics?: AgentMetrics;
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

  constructor(private readonly opts: StatusReporterOptions) {}

  /** Statuses kept while disconnected, latest per shard. */
  get pending(): readonly ShardStatus[] {
    return [...this.unsent.values()];
  }

  /** A session has queued Register on `outbox`: what was kept goes after it. */
  onSessionOpen(outbox: Outbox): void {
    this.outbox = outbox;
    this.established = false;
    for (const [id, status] of this.unsent) {
      // Terminal ones, and an UNHEALTHY one with its cause: Register lists the state but not why.
      if (isTerminal(status.state) || (status.state === ShardState.UNHEALTHY && status.error !== '')) this.send({ case: 'shard', value: status });
      // A running shard's state is in the Register just queued.
      else this.unsent.delete(id);
    }
  }

  /** The stream works: what was kept for it has been handed to it. */
  onSessionEstablished(): void {
    this.established = true;
    this.unsent.clear();
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

  report(reported: ShardStatus): void {
    const status = boundedStatus(reported);
    if (this.outbox) this.send({ case: 'shard', value: status });
    if (!this.outbox || !this.established) this.unsent.set(status.shardId, status);
  }

  /** Reports every transition of the supervisor's shards, and every other change of what a status says. */
  follow(supervisor: Supervisor): void {
    supervisor.on('transition', (t) => this.onTransition(t));
    supervisor.on('status', (s) => this.onStatus(s));
  }

  /** A supervisor transition, reported as the shard's status. */
  onTransition(t: ShardTransition): void {
    if (t.to === ShardState.FAILED || t.to === ShardState.EXITED) this.opts.metrics?.engineExits.inc({ state: ShardState[t.to] });
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
    shardId: cut(shardId, MAX_REPORTED_ID_CHARS),
    replicaId: cut(replicaId, MAX_REPORTED_ID_CHARS),
    error: cut(error, MAX_REPORTED_ERROR_CHARS),
  };
}

/**
 * `s` cut to `max` characters, as a copy: V8's slice() of a long string is a
 * view that keeps the whole original alive, so a sliced 4 MB id still held
 * 4 MB (1.2 GB for 174 refusals waiting in the outbox of a stuck stream).
 */
function cut(s: string, max: number): string {
  return s.length <= max ? s : `${Buffer.from(s.slice(0, max - 1)).toString()}…`;
}
