import type { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { type ControlMessage, type ShardState, type ShardStatus, StopShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { TERMINAL_SHARD_STATES } from '../lib/shard-states.js';
import type { ControlPlaneEvents } from './control-plane-events.js';
import type { NodeRecord } from './node-view.js';
import { RankOrderedStops, type StopTarget } from './rank-ordered-stops.js';
import { generationOf } from './replica-shard-id.js';

export interface StopAllShardsResult {
  /** Reported STOPPED, FAILED or EXITED after the stop. */
  stopped: string[];
  /** Not reported gone within the timeout, or on a node that is not connected: processes may be left. */
  remaining: string[];
}

/** What stopAllShards needs from the control plane around it. */
export interface StopAllShardsHost {
  nodes: Iterable<NodeRecord>;
  /** The shards the control plane placed or is stopping: their rank orders a multi-node replica's stops. */
  shards: Iterable<StopTarget & { state: ShardState }>;
  /** Sends to a node's current stream; false when the node is not connected. */
  send(nodeId: string, msg: ControlMessage['msg']): boolean;
  /** Where 'shard-status' is raised once a status's effects are in place, and 'node-disconnected'. */
  events: EventEmitter<ControlPlaneEvents>;
  /** How long a multi-node replica's worker ranks wait for rank 0 to be reported gone. */
  rankZeroStopWaitMs: number;
  log: Logger;
}

/**
 * Sends StopShard for every shard a node reports or was told to start (a
 * multi-node replica's rank 0 first, its other ranks once rank 0 is gone:
 * RankOrderedStops), and resolves once each is reported gone, or after
 * `timeoutMs` (or when `signal` aborts) with the rest in `remaining`. The
 * caller stops placement first, or the stops are undone.
 */
export async function stopAllShards(host: StopAllShardsHost, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<StopAllShardsResult> {
  const pending = new Map<string, StopTarget>();
  for (const n of host.nodes) {
    for (const [shardId, s] of n.shards) {
      if (TERMINAL_SHARD_STATES.has(s.state)) continue;
      // Known to the node only (manual mode, another control plane's shard):
      // ordered when its running_shards entry gave the rank, else sent at once.
      pending.set(shardId, { shardId, nodeId: n.id, replicaId: s.replicaId, generation: generationOf(shardId) ?? 0, rank: s.rank ?? 0, nnodes: s.nnodes ?? 1 });
    }
  }
  for (const s of host.shards) {
    if (TERMINAL_SHARD_STATES.has(s.state)) continue;
    pending.set(s.shardId, { shardId: s.shardId, nodeId: s.nodeId, replicaId: s.replicaId, generation: s.generation, rank: s.rank, nnodes: s.nnodes });
  }
  const stopped: string[] = [];
  const unreachable: string[] = [];
  let done = () => {};
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const ordered = new RankOrderedStops<StopTarget>({
    rankZeroWaitMs: host.rankZeroStopWaitMs,
    log: host.log,
    send: (s) => {
      if (host.send(s.nodeId, { case: 'stop', value: create(StopShardSchema, { shardId: s.shardId }) })) return true;
      // A node that is away cannot be told; its engines outlive this call.
      if (pending.delete(s.shardId)) unreachable.push(s.shardId);
      if (pending.size === 0) done();
      return false;
    },
  });
  const onStatus = (nodeId: string, st: ShardStatus) => {
    if (pending.get(st.shardId)?.nodeId !== nodeId || !TERMINAL_SHARD_STATES.has(st.state)) return;
    pending.delete(st.shardId);
    stopped.push(st.shardId);
    ordered.gone(st.shardId);
    if (pending.size === 0) done();
  };
  // A rank 0 whose node has gone will not report its end: its workers are not held for it.
  const onDisconnect = (nodeId: string) => {
    for (const s of [...pending.values()]) if (s.nodeId === nodeId) ordered.gone(s.shardId);
  };
  const onAbort = () => done();
  host.events.on('shard-status', onStatus);
  host.events.on('node-disconnected', onDisconnect);
  const timer = setTimeout(onAbort, opts.timeoutMs);
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    ordered.stop([...pending.values()]);
    host.log.info({ shards: [...pending.keys()], unreachable }, 'stopping every shard');
    if (pending.size > 0 && !opts.signal?.aborted) await finished;
  } finally {
    // Worker ranks still held behind a rank 0 are told now: a stop-all that
    // ends sooner than the rank 0 wait must not leave them running untold.
    ordered.releaseAll();
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
    host.events.off('shard-status', onStatus);
    host.events.off('node-disconnected', onDisconnect);
  }
  const remaining = [...unreachable, ...pending.keys()];
  if (remaining.length > 0) host.log.warn({ remaining, timeoutMs: opts.timeoutMs }, 'shards not reported stopped');
  return { stopped, remaining };
}
