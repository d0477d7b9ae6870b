import type { ShardState } from '../gen/llmgw/v1/agent_pb.js';

/**
 * A replica's lifecycle at the control plane.
 * - pending: needs a placement (none found yet, or none tried).
 * - starting: StartShard sent (or shards adopted), not every shard READY.
 * - ready: every shard READY; `url` is set.
 * - unhealthy: was ready, a shard now reports UNHEALTHY (left alone: the agent decides nothing, and neither do we yet).
 * - waiting: adopted shards of a multi-node replica whose other ranks' nodes have not registered yet.
 * - backoff: a shard failed; the rest were stopped and the replica is placed again after retryBackoffMs.
 * - sleeping: a shard reports SLEEPING (a SleepShard freed its GPU memory): alive, not routed to, woken by a WakeShard.
 */
export type ReplicaPhase = 'pending' | 'starting' | 'ready' | 'unhealthy' | 'waiting' | 'backoff' | 'sleeping' | 'draining';

export interface ShardView {
  shardId: string;
  replicaId: string;
  rank: number;
  nnodes: number;
  nodeId: string;
  gpuIndices: number[];
  httpPort: number;
  leaderAddr: string;
  leaderPort: number;
  generation: number;
  /** The last state the agent reported (STARTING until it says otherwise). */
  state: ShardState;
  /** The state's enum name without prefix, e.g. "READY". */
  stateName: string;
  /** Found running at a (re)registration rather than started by this control plane instance. */
  adopted: boolean;
  error: string;
  exitCode: number;
}

export interface ReplicaView {
  id: string;
  /** The replicas entry (`name`) it came from. */
  group: string;
  profile: string;
  engine: string;
  servedModelName: string;
  phase: ReplicaPhase;
  /** Bumped on every placement; part of the shard ids. 0 before the first. */
  generation: number;
  nnodes: number;
  gpusPerShard: number;
  pool: string;
  /** http://<rank 0 node's mgmt_addr, or 127.0.0.1>:<rank 0 http_port>, when ready. */
  url?: string;
  /** Why the replica was last stopped or could not be placed. */
  lastError?: string;
  shards: ShardView[];
}
