import { create } from '@bufbuild/protobuf';
import { AgentMessageSchema, type AgentMessage } from '../../gen/llmgw/v1/agent_pb.js';

/** Where an agent message goes: the request side of the current stream. */
export interface MessageSink {
  write(message: AgentMessage): Promise<void>;
}

/**
 * Messages waiting at most. Statuses coalesce per shard, heartbeats to one,
 * inventories to one between two other messages, so only distinct shards
 * and GPU events count toward it; a node has a handful of each. A flood of
 * 400k refused commands once queued 400k statuses (585 MB held, review
 * finding 6).
 */
export const MAX_PENDING_MESSAGES = 1024;

export interface OutboxOptions {
  /** Default MAX_PENDING_MESSAGES. */
  maxPending?: number;
  /** Default MAX_INVENTORY_DEFER_MS. */
  maxInventoryDeferMs?: number;
  /** Clock, for tests. */
  nowMs?: () => number;
}

/** A message the outbox refused because it was full; the next Register carries the state that matters. */
export class OutboxFullError extends Error {
  constructor(pending: number) {
    super(`the outbox is full (${pending} messages wait for the control-plane stream); message dropped`);
    this.name = 'OutboxFullError';
  }
}

interface Waiter {
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * How long an Inventory may wait to be sent while statuses pass it and newer
 * Inventories replace it (Outbox). Past it, it keeps its place: statuses
 * queued after it wait for it, a newer Inventory queues behind it. A node
 * whose statuses never stop (a flood of refused commands) still sends the
 * Inventory placement reads within about this long.
 */
export const MAX_INVENTORY_DEFER_MS = 1000;

interface Entry {
  /** Messages with the same key replace each other while they wait: only the latest is worth sending. */
  key?: string;
  msg: AgentMessage['msg'];
  waiters: Waiter[];
  /** An Inventory's first request, kept when a newer one replaces it: what MAX_INVENTORY_DEFER_MS counts from. */
  firstAtMs: number;
}

/**
 * What a newer message of the same kind makes stale: a shard's status (the
 * control plane wants the state now, not the states on the way), the
 * heartbeat (fresh GPU readings), the inventory. Register and GPU events
 * are never coalesced: each event is a separate fact.
 */
function keyOf(msg: AgentMessage['msg']): string | undefined {
  switch (msg.case) {
    case 'shard':
      return `shard:${msg.value.shardId}`;
    case 'heartbeat':
      return 'heartbeat';
    case 'inventory':
      return INVENTORY;
    default:
      return undefined;
  }
}

const INVENTORY = 'inventory';

/**
 * Numbers every message an agent process sends and serializes writes to the
 * stream. Heartbeats, status reports and inventory updates come from timers
 * and background shard work at the same time; a stream takes one write at a
 * time, in the order the messages were queued, with two exceptions for the
 * Inventory (below). Bounded: a waiting message is replaced by a newer one of
 * the same key, and past `maxPending` new ones are refused, so a stream the
 * control plane stopped reading costs a fixed amount of memory.
 * stalledForMs() tells the session when to give such a stream up.
 *
 * The Inventory is the node's whole state (64 GPUs and their 4,032 links
 * are more than one HTTP/2 flow-control window), written in 60-216 ms on a
 * loaded host, and a burst of engines becoming READY asks for one or two
 * each (the warmth ledger's time and GPU memory learned): READY statuses
 * queued behind them waited p95 650 ms (bench 16, 64 shards, branch
 * ready7). So, while it
 * waits (not once the stream is writing it), and for at most
 * MAX_INVENTORY_DEFER_MS:
 * - a newer Inventory replaces it and takes the newer one's place in the
 *   queue: the stream carries what it would have carried had the older one
 *   never been asked for. Not past a message other than a status queued
 *   after it (a heartbeat's readings by GPU, a GPU event, which goes before
 *   the Inventory that marks its GPU): the newer one then queues behind it;
 * - a shard status queued after it is written before it. A status names a
 *   shard the control plane started (or Register listed), never a GPU the
 *   Inventory might name first; and the UNHEALTHY statuses a GPU fault
 *   explains go before the Inventory that marks the GPU anyway.
 * Statuses keep their order among themselves (and one shard's are one entry),
 * and every other message keeps its order with every message.
 */
export class Outbox {
  private readonly queue: Entry[] = [];
  /** The waiting message of each key that a newer one may still replace. */
  private readonly byKey = new Map<string, Entry>();
  private writing = false;
  /** 1 while the sink holds a message. */
  private inFlight = 0;
  private closed = false;
  private droppedCount = 0;
  /** When the outbox last made progress: a write completed, or work arrived on an idle outbox. */
  private progressAtMs = 0;
  private readonly maxPending: number;
  private readonly maxInventoryDeferMs: number;
  private readonly now: () => number;

  constructor(
    private readonly sink: MessageSink,
    private readonly nextId: () => bigint,
    opts: OutboxOptions = {},
  ) {
    this.maxPending = opts.maxPending ?? MAX_PENDING_MESSAGES;
    this.maxInventoryDeferMs = opts.maxInventoryDeferMs ?? MAX_INVENTORY_DEFER_MS;
    this.now = opts.nowMs ?? Date.now;
  }

  /** Messages queued but not yet taken by the stream, the one being written included. */
  get pending(): number {
    return this.queue.length + this.inFlight;
  }

  /** Messages refused because the outbox was full, since it was made. */
  get dropped(): number {
    return this.droppedCount;
  }

  /**
   * How long messages have waited without the stream taking any: 0 when
   * nothing waits. A healthy stream takes a message in milliseconds; one that
   * stays stalled for several heartbeat intervals is a control plane that
   * stopped reading (HTTP/2 pings are still answered), and the session should
   * drop it and reconnect.
   */
  stalledForMs(): number {
    return this.pending === 0 ? 0 : Math.max(0, this.now() - this.progressAtMs);
  }

  /**
   * Queues a message. Resolves once the stream has taken it, or a newer
   * message of the same key that replaced it; rejects when the stream is
   * gone or the outbox is full (the caller need not care: the next Register
   * carries the state that matters).
   */
  send(msg: AgentMessage['msg']): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the control-plane stream is closed'));
    return new Promise<void>((resolve, reject) => {
      const key = keyOf(msg);
      const waiting = key === undefined ? undefined : this.byKey.get(key);
      if (waiting && key === INVENTORY && this.overdue(waiting)) {
        // Waited long enough: it keeps its place and its content, and this one queues behind it.
        this.byKey.delete(key);
      } else if (waiting && key === INVENTORY) {
        // Superseded before it was sent: this one is sent instead, from where it was asked for.
        this.queue.splice(this.queue.indexOf(waiting), 1);
        this.queue.push(waiting);
        waiting.msg = msg;
        waiting.waiters.push({ resolve, reject });
        return;
      } else if (waiting) {
        waiting.msg = msg;
        waiting.waiters.push({ resolve, reject });
        return;
      }
      if (this.pending >= this.maxPending) {
        this.droppedCount += 1;
        reject(new OutboxFullError(this.pending));
        return;
      }
      if (this.pending === 0) this.progressAtMs = this.now();
      // A message that must not be passed by a newer Inventory: the waiting one keeps its content, a newer one queues behind this.
      if (msg.case !== 'shard' && msg.case !== 'inventory') this.byKey.delete(INVENTORY);
      const entry: Entry = { key, msg, waiters: [{ resolve, reject }], firstAtMs: this.now() };
      this.queue.push(entry);
      if (key !== undefined) this.byKey.set(key, entry);
      void this.pump();
    });
  }

  private overdue(entry: Entry): boolean {
    return this.now() - entry.firstAtMs >= this.maxInventoryDeferMs;
  }

  /**
   * The next message to write: the first queued, or the first status right
   * behind the Inventories at the head that may still be passed.
   */
  private takeNext(): Entry | undefined {
    let i = 0;
    while (i < this.queue.length && this.queue[i]?.msg.case === 'inventory' && !this.overdue(this.queue[i] as Entry)) i++;
    const at = i > 0 && this.queue[i]?.msg.case === 'shard' ? i : 0;
    const [entry] = this.queue.splice(at, 1);
    if (entry?.key !== undefined && this.byKey.get(entry.key) === entry) this.byKey.delete(entry.key);
    return entry;
  }

  private async pump(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    // Like the promise chain this replaces: the first write starts on a later
    // microtask, so messages queued in the same tick keep their order.
    await Promise.resolve();
    try {
      for (let entry = this.takeNext(); entry !== undefined; entry = this.takeNext()) {
        if (this.closed) {
          settle(entry, new Error('the control-plane stream is closed'));
          continue;
        }
        const message = create(AgentMessageSchema, { messageId: this.nextId(), msg: entry.msg });
        this.inFlight = 1;
        try {
          await this.sink.write(message);
          this.progressAtMs = this.now();
          settle(entry);
        } catch (err) {
          settle(entry, err);
        } finally {
          this.inFlight = 0;
        }
      }
    } finally {
      this.writing = false;
    }
  }

  close(): void {
    this.closed = true;
    for (const entry of this.queue.splice(0)) settle(entry, new Error('the control-plane stream is closed'));
    this.byKey.clear();
  }
}

function settle(entry: Entry, err?: unknown): void {
  for (const w of entry.waiters) {
    if (err === undefined) w.resolve();
    else w.reject(err);
  }
}
