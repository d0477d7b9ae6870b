import { ShardState, type AgentMessage, type ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import { isTerminal } from '../lib/shard-states.js';
import type { AgentMetrics } from './agent-metrics.js';
import type { Outbox } from './outbox.js';
import { statusFromSnapshot } from './shard-report.js';
import type { ShardTransition } from './supervisor/supervisor.js';

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

  report(status: ShardStatus): void {
    if (this.outbox) this.send({ case: 'shard', value: status });
    if (!this.outbox || !this.established) this.unsent.set(status.shardId, status);
  }

  /** A supervisor transition, reported as the shard's status. */
  onTransition(t: ShardTransition): void {
    if (t.to === ShardState.FAILED || t.to === ShardState.EXITED) this.opts.metrics?.engineExits.inc({ state: ShardState[t.to] });
    this.report(statusFromSnapshot(this.opts.nodeId, t.shard));
  }
}
