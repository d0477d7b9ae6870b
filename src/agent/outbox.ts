import { create } from '@bufbuild/protobuf';
import { AgentMessageSchema, type AgentMessage } from '../gen/llmgw/v1/agent_pb.js';

/** Where an agent message goes: the request side of the current stream. */
export interface MessageSink {
  write(message: AgentMessage): Promise<void>;
}

/**
 * Numbers every message an agent process sends and serializes writes to the
 * stream. Heartbeats, status reports and inventory updates come from timers
 * and background shard work at the same time; a stream takes one write at a
 * time, in the order the ids were given.
 */
export class Outbox {
  private tail: Promise<void> = Promise.resolve();
  private heartbeatQueued = false;
  private closed = false;
  private backlog = 0;

  constructor(
    private readonly sink: MessageSink,
    private readonly nextId: () => bigint,
  ) {}

  /** Messages written to the outbox but not yet taken by the stream. */
  get pending(): number {
    return this.backlog;
  }

  /**
   * Queues a message. Resolves once the stream has taken it; rejects when the
   * stream is gone (the caller need not care: the next Register carries the
   * state that matters).
   */
  send(msg: AgentMessage['msg']): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the control-plane stream is closed'));
    // A heartbeat still waiting behind a stuck stream makes a second one
    // pointless; dropping it keeps a stalled stream from growing memory.
    if (msg.case === 'heartbeat') {
      if (this.heartbeatQueued) return Promise.resolve();
      this.heartbeatQueued = true;
    }
    const message = create(AgentMessageSchema, { messageId: this.nextId(), msg });
    this.backlog++;
    const write = this.tail.then(async () => {
      if (msg.case === 'heartbeat') this.heartbeatQueued = false;
      try {
        if (this.closed) throw new Error('the control-plane stream is closed');
        await this.sink.write(message);
      } finally {
        this.backlog--;
      }
    });
    this.tail = write.catch(() => {});
    return write;
  }

  close(): void {
    this.closed = true;
  }
}
