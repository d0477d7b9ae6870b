import { createContextValues, type HandlerContext } from '@connectrpc/connect';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { type EventsResponse, EventsRequestSchema } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { ADMIN_PEER } from '../../../src/agent/admin/admin-peer.js';
import { eventsRoute, MAX_EVENT_FOLLOWS_PER_USER, MAX_QUEUED_EVENTS } from '../../../src/agent/admin/events-route.js';
import { AgentEventRing } from '../../../src/agent/events/agent-event-ring.js';
import { MAX_LOG_READS_PER_USER } from '../../../src/agent/admin/log-call-admission.js';

/* The Events handler on a real ring: what a follow is sent, and its bounds. */

function backendOf(ring: AgentEventRing) {
  return { events: (afterSeq: number, sinceMs: number) => ring.list(afterSeq, sinceMs), followEvents: (l: Parameters<AgentEventRing['subscribe']>[0]) => ring.subscribe(l) };
}

function ctxOf(uid: number, signal: AbortSignal): HandlerContext {
  return { signal, values: createContextValues().set(ADMIN_PEER, { uid, gid: uid, pid: 1 }) } as unknown as HandlerContext;
}

const ev = (message: string) => ({ kind: 'refusal' as const, shardId: 's1', message, fields: { why: message } });

describe('the Events route', () => {
  it('sends the backlog, then each new event as it is recorded, and lets the ring go when the client leaves', async () => {
    const ring = new AgentEventRing();
    ring.record(ev('before'));
    const route = eventsRoute(backendOf(ring));
    const left = new AbortController();
    const stream = route(create(EventsRequestSchema, { follow: true }), ctxOf(1000, left.signal));
    expect(((await stream.next()).value as EventsResponse).events.map((e) => e.message)).toEqual(['before']);
    const next = stream.next();
    ring.record(ev('after'));
    const got = (await next).value as EventsResponse;
    expect(got.events.map((e) => [Number(e.seq), e.kind, e.shardId, e.fields.why])).toEqual([[2, 'refusal', 's1', 'after']]);
    const ended = stream.next();
    left.abort();
    expect((await ended).done).toBe(true);
    expect(ring.followers).toBe(0);
  });

  it('sends an empty first message to a follow of an empty ring, and without follow just what is kept', async () => {
    const ring = new AgentEventRing();
    const route = eventsRoute(backendOf(ring));
    const left = new AbortController();
    const follow = route(create(EventsRequestSchema, { follow: true }), ctxOf(0, left.signal));
    expect((await follow.next()).value?.events).toEqual([]);
    left.abort();
    await follow.return(undefined);
    ring.record(ev('x'));
    const once = [];
    for await (const r of route(create(EventsRequestSchema, {}), ctxOf(0, new AbortController().signal))) once.push(...r.events);
    expect(once.map((e) => e.message)).toEqual(['x']);
  });

  it(`refuses a user's follow past ${MAX_EVENT_FOLLOWS_PER_USER} open ones, naming the cap, and takes it again once one ends`, async () => {
    const route = eventsRoute(backendOf(new AgentEventRing()));
    const open = [];
    for (let i = 0; i < MAX_EVENT_FOLLOWS_PER_USER; i++) {
      const left = new AbortController();
      const s = route(create(EventsRequestSchema, { follow: true }), ctxOf(1000, left.signal));
      await s.next();
      open.push({ s, left });
    }
    const refused = route(create(EventsRequestSchema, { follow: true }), ctxOf(1000, new AbortController().signal));
    await expect(refused.next()).rejects.toThrow(/uid 1000 has 8 event follows in progress/);
    const first = open[0] as (typeof open)[number];
    first.left.abort();
    await first.s.return(undefined);
    const again = route(create(EventsRequestSchema, { follow: true }), ctxOf(1000, new AbortController().signal));
    await expect(again.next()).resolves.toMatchObject({ done: false });
  });

  it('refuses a user\'s Events read past the read cap while the others go unread (security review 3, S10), and root still reads', async () => {
    const ring = new AgentEventRing();
    for (let i = 0; i < 3000; i++) ring.record(ev(`e${i}`));
    const route = eventsRoute(backendOf(ring));
    // Unread reads: each holds its slot until its client reads on or leaves.
    const held = [];
    for (let i = 0; i < MAX_LOG_READS_PER_USER; i++) {
      const s = route(create(EventsRequestSchema, {}), ctxOf(1000, new AbortController().signal));
      await s.next();
      held.push(s);
    }
    const refused = route(create(EventsRequestSchema, {}), ctxOf(1000, new AbortController().signal));
    await expect(refused.next()).rejects.toThrow(/the agent refused the Events call: uid 1000 has 4 event reads in progress/);
    await expect(route(create(EventsRequestSchema, {}), ctxOf(0, new AbortController().signal)).next()).resolves.toMatchObject({ done: false });
    for (const s of held) await s.return(undefined);
    await expect(route(create(EventsRequestSchema, {}), ctxOf(1000, new AbortController().signal)).next()).resolves.toMatchObject({ done: false });
  });

  it(`ends a follow that falls more than ${MAX_QUEUED_EVENTS} events behind, saying so`, async () => {
    const ring = new AgentEventRing();
    const route = eventsRoute(backendOf(ring));
    const stream = route(create(EventsRequestSchema, { follow: true }), ctxOf(0, new AbortController().signal));
    await stream.next();
    for (let i = 0; i <= MAX_QUEUED_EVENTS; i++) ring.record(ev(`e${i}`));
    await expect(stream.next()).rejects.toThrow(/fell more than 1000 events behind/);
    expect(ring.followers).toBe(0);
  });
});
