import { create } from '@bufbuild/protobuf';
import { timestampFromMs, timestampMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import { type AgentEvent, AgentEventSchema, type EventsRequest, type EventsResponse, EventsResponseSchema } from '../../gen/llmgw/v1/admin_pb.js';
import { type AgentEventView, EVENT_RING_CAPACITY } from '../events/agent-event-ring.js';
import type { AdminBackend } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';
import { MAX_LOG_READS, MAX_LOG_READS_PER_USER, ROOT_RESERVED_LOG_READS, SlotPool } from './log-call-admission.js';

/**
 * `ctl events -f` one user other than root may have open at once: a few
 * terminals each with `ctl top` and `ctl events -f`. A follow costs a
 * listener and a queue of at most MAX_QUEUED_EVENTS; the cap is on the
 * members of the admin group who could otherwise open thousands.
 */
export const MAX_EVENT_FOLLOWS_PER_USER = 8;
/** Event follows open at once, whoever holds them. */
export const MAX_EVENT_FOLLOWS = 32;
/** Of those, the ones kept for root and the agent's own user. */
export const ROOT_RESERVED_EVENT_FOLLOWS = 4;
/** Events per EventsResponse: the whole ring is sent as a few messages, not one of 300 KB. */
export const EVENTS_PER_MESSAGE = 250;
/**
 * Events held for a follower that does not read. A client that falls
 * further behind than the ring itself holds would miss events either way:
 * its follow is ended, with a message saying so, rather than grow without
 * bound while HTTP/2 flow control holds its writes.
 */
export const MAX_QUEUED_EVENTS = EVENT_RING_CAPACITY;

/** The Events handler, with the follows it bounds; the route's registration wraps it in endedWithClient. */
export function eventsRoute(backend: Pick<AdminBackend, 'events' | 'followEvents'>): (req: EventsRequest, ctx: HandlerContext) => AsyncGenerator<EventsResponse> {
  const follows = new SlotPool({ total: MAX_EVENT_FOLLOWS, perUser: MAX_EVENT_FOLLOWS_PER_USER, rootReserved: ROOT_RESERVED_EVENT_FOLLOWS });
  // Reads too take a slot (security review 3, S10): one member's 64 connections of 32 unread Events calls held 580 MB.
  const reads = new SlotPool({ total: MAX_LOG_READS, perUser: MAX_LOG_READS_PER_USER, rootReserved: ROOT_RESERVED_LOG_READS });
  return (req, ctx) => streamEvents(backend, follows, reads, req, ctx);
}

function toAgentEvent(e: AgentEventView): AgentEvent {
  return create(AgentEventSchema, {
    seq: BigInt(e.seq),
    at: timestampFromMs(e.atMs),
    kind: e.kind,
    shardId: e.shardId ?? '',
    gpu: e.gpu,
    message: e.message,
    fields: e.fields,
  });
}

function* messagesOf(events: readonly AgentEventView[]): Generator<EventsResponse> {
  for (let i = 0; i < events.length; i += EVENTS_PER_MESSAGE) {
    yield create(EventsResponseSchema, { events: events.slice(i, i + EVENTS_PER_MESSAGE).map(toAgentEvent) });
  }
}

/**
 * The kept events, then with follow each new one as it is recorded: the
 * ring calls the listener synchronously, which wakes this generator at
 * once, so a transition reaches the client with no poll between.
 */
async function* streamEvents(backend: Pick<AdminBackend, 'events' | 'followEvents'>, follows: SlotPool, reads: SlotPool, req: EventsRequest, ctx: HandlerContext): AsyncGenerator<EventsResponse> {
  const sinceMs = req.since ? timestampMs(req.since) : 0;
  const afterSeq = Number(req.afterSeq);
  if (!req.follow) {
    const slot = reads.claim(ctx.values.get(ADMIN_PEER)?.uid, 'event reads');
    if ('why' in slot) {
      throw new ConnectError(`the agent refused the Events call: ${slot.why}; wait for one to end and try again`, Code.ResourceExhausted);
    }
    try {
      yield* messagesOf(backend.events(afterSeq, sinceMs));
    } finally {
      slot.release();
    }
    return;
  }
  const claimed = follows.claim(ctx.values.get(ADMIN_PEER)?.uid, 'event follows');
  if ('why' in claimed) {
    throw new ConnectError(`the agent refused the Events call: ${claimed.why}; end a \`ctl events -f\` or \`ctl top\` of this user and try again`, Code.ResourceExhausted);
  }
  const queued: AgentEventView[] = [];
  let overflowed = false;
  let wake: (() => void) | undefined;
  const onAbort = () => wake?.();
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  // Subscribed and read in one synchronous step: no event falls between the backlog and the follow.
  const unsubscribe = backend.followEvents((e) => {
    if (queued.length >= MAX_QUEUED_EVENTS) overflowed = true;
    else queued.push(e);
    wake?.();
  });
  const backlog = backend.events(afterSeq, sinceMs);
  try {
    // Something goes out now even when nothing is kept, so the client knows the follow has started.
    if (backlog.length === 0) yield create(EventsResponseSchema, { events: [] });
    else yield* messagesOf(backlog);
    while (!ctx.signal.aborted) {
      if (overflowed) {
        throw new ConnectError(`this follow fell more than ${MAX_QUEUED_EVENTS} events behind and missed some; run it again`, Code.ResourceExhausted);
      }
      if (queued.length === 0) {
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
        continue;
      }
      yield* messagesOf(queued.splice(0));
    }
  } finally {
    unsubscribe();
    ctx.signal.removeEventListener('abort', onAbort);
    claimed.release();
  }
}
