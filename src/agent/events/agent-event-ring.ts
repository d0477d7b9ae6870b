import { cutString } from '../../lib/cut-string.js';
import type { ShardId } from '../../lib/shard-id.js';

/**
 * What `ctl events` can show: one state change the agent saw.
 *
 * - shard: a shard's state transition, with why
 * - gpu: a GPU fault, or its clearing
 * - connection: the control-plane stream changing phase
 * - refusal: a start or drain the agent refused
 * - adoption: what became of an engine a previous agent left
 */
export type AgentEventKind = 'shard' | 'gpu' | 'connection' | 'refusal' | 'adoption' | 'node';

export interface AgentEventView {
  /** One more than the event before, for the life of the process: a gap is what the ring dropped. */
  seq: number;
  atMs: number;
  kind: AgentEventKind;
  shardId?: ShardId | string;
  gpu?: number;
  message: string;
  /** The facts behind it, as the log line carries them. */
  fields: Record<string, string>;
}

export type NewAgentEvent = Omit<AgentEventView, 'seq' | 'atMs'> & { atMs?: number };

/**
 * Events kept: about an hour of a busy 8-GPU node (a restart loop makes a
 * few transitions a minute per shard), and at ~300 bytes each some 300 KB,
 * whatever a flooding control plane sends.
 */
export const EVENT_RING_CAPACITY = 1000;

export type EventListener = (e: AgentEventView) => void;

/**
 * The agent's recent state changes, bounded, and the followers told of each
 * one synchronously as it is recorded: `ctl events -f` prints a transition
 * without waiting on any poll.
 */
export class AgentEventRing {
  private readonly events: AgentEventView[] = [];
  private readonly listeners = new Set<EventListener>();
  private lastSeq = 0;

  constructor(private readonly capacity = EVENT_RING_CAPACITY) {}

  record(e: NewAgentEvent): AgentEventView {
    const event: AgentEventView = { ...bounded(e), seq: ++this.lastSeq, atMs: e.atMs ?? Date.now() };
    this.events.push(event);
    if (this.events.length > this.capacity) this.events.shift();
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch {
        // A follower's bug must not stop the others, nor the change that was recorded.
      }
    }
    return event;
  }

  /** The kept events with seq above `afterSeq` and time at or after `sinceMs`, oldest first. */
  list(afterSeq = 0, sinceMs = 0): AgentEventView[] {
    return this.events.filter((e) => e.seq > afterSeq && e.atMs >= sinceMs);
  }

  /** Calls `listener` for every event recorded from now on; the returned function stops it. */
  subscribe(listener: EventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Followers now: what the admin server's slots bound. */
  get followers(): number {
    return this.listeners.size;
  }
}

/** Longest shard id, message and field value kept: a refusal echoes what the control plane sent, and a control message may be 16 MiB. */
const MAX_EVENT_ID_CHARS = 160;
const MAX_EVENT_TEXT_CHARS = 1024;

/**
 * `e` with every string cut short, as copies (cutString): 1000 kept
 * refusals of 1 MB shard ids held 430 MB of the agent
 * (test/security/control-plane-flood.test.ts).
 */
function bounded(e: NewAgentEvent): NewAgentEvent {
  const fields: Record<string, string> = {};
  for (const [k, v] of Object.entries(e.fields)) fields[cutString(k, MAX_EVENT_ID_CHARS)] = cutString(v, MAX_EVENT_TEXT_CHARS);
  return {
    ...e,
    ...(e.shardId !== undefined ? { shardId: cutString(e.shardId, MAX_EVENT_ID_CHARS) } : {}),
    message: cutString(e.message, MAX_EVENT_TEXT_CHARS),
    fields,
  };
}
