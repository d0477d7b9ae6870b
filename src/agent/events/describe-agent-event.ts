import { type GpuEvent, GpuEventKind, ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import type { ConnectionPhase, ConnectionStatus } from '../connection/connection-state.js';
import type { AdoptResultView } from '../recover-engines.js';
import type { ShardTransition } from '../supervisor/shard/shard-snapshot.js';
import { stateName } from '../../lib/shard-states.js';
import type { NewAgentEvent } from './agent-event-ring.js';

/*
 * How each source of a state change reads as an event: pure, so that what
 * `ctl events` says is decided apart from where the agent hears of it.
 */

/** "STARTING → READY: answers /health", with the log line's fields. */
export function shardTransitionEvent(t: ShardTransition): NewAgentEvent {
  const from = stateName(t.from);
  const to = stateName(t.to);
  const why = t.why ?? (t.shard.error || '');
  return {
    kind: 'shard',
    shardId: t.shard.shardId,
    // A new shard's first transition comes from UNSPECIFIED, which says nothing to an operator.
    message: `${t.from === ShardState.UNSPECIFIED ? to : `${from} → ${to}`}${why ? `: ${why}` : ''}`,
    fields: { from, to, why, replica: t.shard.replicaId, pid: String(t.shard.pid) },
  };
}

/** A GPU fault or its clearing, in the watch's own sentence ("Xid 79: GPU has fallen off the bus"). */
export function gpuEventEvent(e: GpuEvent): NewAgentEvent {
  return {
    kind: 'gpu',
    gpu: e.gpuIndex,
    message: `GPU ${e.gpuIndex}: ${e.message}`,
    fields: {
      event: GpuEventKind[e.kind] ?? String(e.kind),
      xid: String(e.xid),
      source: e.source,
      uuid: e.gpuUuid,
      shards: e.shardIds.join(','),
    },
  };
}

/** The stream changing phase: "connected", or "retrying: attempt 3, …: <error>". */
export function connectionEvent(from: ConnectionPhase, s: ConnectionStatus): NewAgentEvent {
  let message = `control plane ${s.server}: ${from} → ${s.phase}`;
  if (s.phase === 'retrying') {
    const inMs = Math.max(0, s.nextAttemptAtMs - Date.now());
    message += ` (attempt ${s.attempt}, next in ${(inMs / 1000).toFixed(1)}s): ${s.lastError}`;
  }
  return {
    kind: 'connection',
    message,
    fields: { from, to: s.phase, server: s.server, attempt: String(s.attempt), error: s.phase === 'retrying' ? s.lastError : '' },
  };
}

/** A start or drain the agent would not do, and why (what the control plane is told). */
export function refusalEvent(what: 'start' | 'drain' | 'sleep' | 'wake', shard: { shardId: string; replicaId: string }, why: string): NewAgentEvent {
  return {
    kind: 'refusal',
    shardId: shard.shardId,
    message: `refused to ${what}: ${why}`,
    fields: { refused: what, replica: shard.replicaId, why },
  };
}

/** What became of each engine a previous agent left; the ones already supervised are no news. */
export function adoptionEvents(results: readonly AdoptResultView[]): NewAgentEvent[] {
  return results
    .filter((r) => r.outcome !== 'already-supervised')
    .map((r) => ({
      kind: 'adoption',
      shardId: r.shardId,
      message: r.reason ? `${r.outcome}: ${r.reason}` : r.outcome,
      fields: { outcome: r.outcome, pid: String(r.pid), reason: r.reason },
    }));
}

/** The node cordoned or uncordoned, by whom and why (walkthrough 3, item 7: an on-node audit feed). */
export function cordonEvent(state: { reason: string; byUid: number } | undefined, uid: number): NewAgentEvent {
  const by = uid >= 0 ? ` by uid ${uid}` : '';
  return state
    ? { kind: 'node', message: `cordoned${by}${state.reason ? `: ${state.reason}` : ''}`, fields: { condition: 'Cordoned', active: 'true', uid: String(uid), reason: state.reason } }
    : { kind: 'node', message: `uncordoned${by}`, fields: { condition: 'Cordoned', active: 'false', uid: String(uid), reason: '' } };
}

/** Disk pressure on or off, with the watch's reason. */
export function diskPressureEvent(active: boolean, reason: string): NewAgentEvent {
  return {
    kind: 'node',
    message: active ? `disk pressure: ${reason}` : 'disk pressure cleared',
    fields: { condition: 'DiskPressure', active: String(active), reason },
  };
}
