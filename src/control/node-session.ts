import { createWritableIterable, type WritableIterable } from '@connectrpc/connect/protocol';
import type { ControlMessage } from '../gen/llmgw/v1/agent_pb.js';

/** Shortest silence after which a heartbeating stream may be taken for dead; timers jitter by more than a fast heartbeat. */
export const MIN_LIVENESS_MS = 1_000;

/**
 * One Connect stream from an agent. A node id may have several over its
 * life (reconnects, a newer stream replacing a stale one); only the newest
 * carries commands.
 */
export class NodeSession {
  readonly id: number;
  /** Where the stream comes from (`address:port`), for the operator reading a refusal. */
  readonly peer: string;
  /** Set by the stream's first accepted Register. */
  nodeId?: string;
  /** When that Register was accepted. */
  registeredAt?: Date;
  /** When the last message of any kind arrived: a live agent heartbeats, a dead stream goes quiet. */
  lastMessageAt: Date = new Date();
  #lastHeartbeatAtMs?: number;
  #heartbeatGapMs?: number;
  readonly #outbox: WritableIterable<ControlMessage> = createWritableIterable<ControlMessage>();
  #ended?: string;
  #refusal?: Error;

  constructor(id: number, peer = 'an unknown peer') {
    this.id = id;
    this.peer = peer;
  }

  /** Records a heartbeat's arrival; the gap between the last two is the stream's proven cadence. */
  noteHeartbeat(nowMs: number = Date.now()): void {
    if (this.#lastHeartbeatAtMs !== undefined) this.#heartbeatGapMs = nowMs - this.#lastHeartbeatAtMs;
    this.#lastHeartbeatAtMs = nowMs;
  }

  /**
   * How long this stream may stay silent and still count as alive: 2.5
   * heartbeat gaps (one late heartbeat is not death), at least
   * MIN_LIVENESS_MS, at most `capMs`. 0 until two heartbeats have arrived:
   * a stream that never proved a cadence is not proof of a live agent.
   */
  livenessMs(capMs: number): number {
    if (this.#heartbeatGapMs === undefined) return 0;
    return Math.min(capMs, Math.max(MIN_LIVENESS_MS, 2.5 * this.#heartbeatGapMs));
  }

  /** Set by refuse(): the error the response stream ends with, so the agent logs why. */
  get refusal(): Error | undefined {
    return this.#refusal;
  }

  /** Ends the stream with an error the agent receives, instead of a clean close it would retry at once. */
  refuse(err: Error): boolean {
    if (!this.end(err.message)) return false;
    this.#refusal = err;
    return true;
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
