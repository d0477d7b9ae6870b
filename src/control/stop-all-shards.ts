import type { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { type ControlMessage, type ShardStatus, StopShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { TERMINAL_SHARD_STATES } from '../lib/shard-states.js';
import type { ControlPlaneEvents } from './control-plane-events.js';
import type { NodeRecord } from './node-view.js';
import type { ReplicaView } from './replica-view.js';

export interface StopAllShardsResult {
  /** Reported STOPPED, FAILED or EXITED after the stop. */
  stopped: string[];
  /** Not reported gone within the timeout, or on a node that is not connected: processes may be left. */
  remaining: string[];
}

/** What stopAllShards needs from the control plane around it. */
export interface StopAllShardsHost {
  nodes: Iterable<NodeRecord>;
  replicas: readonly ReplicaView[];
  /** Sends to a node's current stream; false when the node is not connected. */
  send(nodeId: string, msg: ControlMessage['msg']): boolean;
  /** Where 'shard-status' is raised once a status's effects are in place. */
  events: EventEmitter<ControlPlaneEvents>;
  log: Logger;
}

/**
 * Sends StopShard for every shard a node reports or was told to start, and
 * resolves once each is reported gone, or after `timeoutMs` (or when
 * `signal` aborts) with the rest in `remaining`. The caller stops placement
 * first, or the stops are undone.
 */
export async function stopAllShards(host: StopAllShardsHost, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<StopAllShardsResult> {
  const pending = new Map<string, string>(); // shard id → node id
  for (const n of host.nodes) for (const [id, s] of n.shards) if (!TERMINAL_SHARD_STATES.has(s.state)) pending.set(id, n.id);
  for (const r of host.replicas) for (const s of r.shards) if (!TERMINAL_SHARD_STATES.has(s.state)) pending.set(s.shardId, s.nodeId);
  const stopped: string[] = [];
  const remaining: string[] = [];
  const onStatus = (nodeId: string, st: ShardStatus) => {
    if (pending.get(st.shardId) !== nodeId || !TERMINAL_SHARD_STATES.has(st.state)) return;
    pending.delete(st.shardId);
    stopped.push(st.shardId);
    if (pending.size === 0) done();
  };
  let done = () => {};
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const onAbort = () => done();
  host.events.on('shard-status', onStatus);
  const timer = setTimeout(onAbort, opts.timeoutMs);
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for (const [shardId, nodeId] of [...pending]) {
      if (!host.send(nodeId, { case: 'stop', value: create(StopShardSchema, { shardId }) })) {
        // A node that is away cannot be told; its engines outlive this call.
        pending.delete(shardId);
        remaining.push(shardId);
      }
    }
    host.log.info({ shards: [...pending.keys()], unreachable: remaining }, 'stopping every shard');
    if (pending.size > 0 && !opts.signal?.aborted) await finished;
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onAbort);
    host.events.off('shard-status', onStatus);
  }
  remaining.push(...pending.keys());
  if (remaining.length > 0) host.log.warn({ remaining, timeoutMs: opts.timeoutMs }, 'shards not reported stopped');
  return { stopped, remaining };
}
