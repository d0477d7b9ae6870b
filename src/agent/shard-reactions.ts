import { timestampDate } from '@bufbuild/protobuf/wkt';
import { type GpuEvent, GpuEventKind, ShardState } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { isLaunchDone, isTerminal } from '../lib/shard-states.js';
import type { AgentEventRing } from './events/agent-event-ring.js';
import { shardTransitionEvent } from './events/describe-agent-event.js';
import type { GpuHealthWatch } from './health/gpu-health-watch.js';
import type { NodeModels } from './models/node-models.js';
import type { WarmthLedger } from './models/warmth-ledger.js';
import type { CompileClaims } from './models/compile-claims.js';
import { addGpuEventsToFailureRecord, FAILURE_GPU_EVENT_WINDOW_MS } from './supervisor/shard/shard-failure.js';
import type { ShardReaction } from './supervisor/shard/shard-reaction.js';
import type { ShardSnapshot, ShardTransition } from './supervisor/shard/shard-snapshot.js';


export interface ShardReactionParts {
  events: AgentEventRing;
  models: NodeModels;
  warmth: WarmthLedger;
  /** Which compile cache each profile's READY start used (compile-claims.ts); none without a store. */
  compileClaims?: CompileClaims;
  /** The GPU health watch, once started. */
  health: () => GpuHealthWatch | undefined;
  logDir: string;
  log: Logger;
  /** Told when an engine of this agent is gone, so that a scan listing it from before is not believed (gpu-process-sightings.ts). */
  engineEnded?: (pgrp: number) => void;
  /** Told of every transition: a sleep-mode shard's port guard is lifted once it has ended (sleep-port-guards.ts). */
  sleepPortEnded?: (t: ShardTransition) => void;
}

/**
 * What follows a shard's transition, beside its status going out
 * (StatusReporter.follow): each a named reaction, run in this order.
 */
export function shardReactions(p: ShardReactionParts): ShardReaction[] {
  return [
    // A crash's failure record carries its GPUs' events of the minute before it (shard-failure.ts).
    { name: 'failure record gets its GPU events', on: (t) => void (t.to === ShardState.FAILED && addGpuEvents(p, t.shard)) },
    // `ctl events` and `ctl top`.
    { name: 'event recorded', on: (t) => p.events.record(shardTransitionEvent(t)) },
    // An ended shard whose engine is gone reads no weights: its model may be
    // evicted again (a start of it pins the model anew). One whose engine
    // still runs (not ready in time) keeps the pin until it is stopped.
    { name: 'model unpinned', on: (t) => void (isTerminal(t.to) && !t.shard.running && p.models.unpin(t.shard.shardId)) },
    // How long a launch or a wake took to READY, by where it came from (warmth-ledger.ts).
    { name: 'time to READY learned', on: (t) => p.warmth.follow(t) },
    // Which compile cache a start that reached READY used: what +compile is claimed from (issue 51).
    { name: 'compile cache seen', on: (t) => void (isLaunchDone(t.from, t.to) && p.compileClaims?.seen(seenStart(t.shard))) },
    // Its GPU memory in a scan begun before this is its own, not a foreign process's (issue 47, item 7).
    { name: 'engine end noted', on: (t) => void (isTerminal(t.to) && !t.shard.running && p.engineEnded?.(t.shard.pid)) },
    // Its port open to local users again once its engine is gone (security review 4, S6).
    { name: 'sleep port guard lifted', on: (t) => p.sleepPortEnded?.(t) },
  ];
}

/** The events of the failed shard's GPUs in the minute before now, written into its failure record. */
async function addGpuEvents(p: ShardReactionParts, shard: ShardSnapshot): Promise<void> {
  const watch = p.health();
  if (!watch) return;
  const sinceMs = Date.now() - FAILURE_GPU_EVENT_WINDOW_MS;
  const atMs = (e: GpuEvent) => timestampDate(e.at as NonNullable<GpuEvent['at']>).getTime();
  const events = shard.spec.gpuIndices
    .flatMap((gpu) => watch.recentEvents(gpu))
    .filter((e) => e.at !== undefined && atMs(e) >= sinceMs)
    .sort((a, b) => atMs(a) - atMs(b))
    .map((e) => ({ gpu: e.gpuIndex, kind: GpuEventKind[e.kind] ?? String(e.kind), xid: e.xid, message: e.message, source: e.source, at: new Date(atMs(e)).toISOString() }));
  await addGpuEventsToFailureRecord({ logDir: p.logDir, log: p.log }, shard.shardId, events);
}

/** A READY shard as CompileClaims.seen reads it. */
function seenStart(s: ShardSnapshot) {
  const p = s.spec.profile;
  return { shardId: s.shardId, engine: p?.engine ?? '', model: p?.model ?? '', profile: p?.name ?? '', logPath: s.logPath, startedAtMs: s.startedAtMs };
}
