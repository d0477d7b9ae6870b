import { createWritableIterable, type WritableIterable } from '@connectrpc/connect/protocol';
import type { ControlMessage } from '../gen/llmgw/v1/agent_pb.js';

/**
 * One Connect stream from an agent. A node id may have several over its
 * life (reconnects, a newer stream replacing a stale one); only the newest
 * carries commands.
 */
export class NodeSession {
  readonly id: number;
  /** Set by the stream's first accepted Register. */
  nodeId?: string;
  readonly #outbox: WritableIterable<ControlMessage> = createWritableIterable<ControlMessage>();
  #ended?: string;

  constructor(id: number) {
    this.id = id;
  }

  /** The response stream: everything sent, until end() is called. */
  get outbox(): AsyncIterable<ControlMessage> {
    return this.#outbox;
  }

  get ended(): boolean {
    return this.#ended !== undefined;
  }

  /** Why the session ended, once it has. */
  get endReason(): string | undefined {
    return this.#ended;
  }

  /** Queues a message; false when the session has ended. */
  send(msg: ControlMessage): boolean {
    if (this.#ended !== undefined) return false;
    // Not awaited: the promise settles when the message is read from the
    // queue, and a stream that ends first rejects it; either way the queue,
    // not the caller, owns the message now.
    this.#outbox.write(msg).catch(() => {});
    return true;
  }

  /** Ends the response stream after what is queued; the first reason wins. */
  end(reason: string): boolean {
    if (this.#ended !== undefined) return false;
    this.#ended = reason;
    this.#outbox.close();
    return true;
  }
}
