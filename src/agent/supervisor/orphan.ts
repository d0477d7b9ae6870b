import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';

/** A state file left by another supervisor instance (normally a previous agent). */
export interface Orphan {
  shardId: string;
  /** The recorded pid when it is still ours, else a live process found holding the shard's log, else 0. */
  pid: number;
  /** Some process of the shard is still running. */
  alive: boolean;
  /** State file readable, valid, and its identity (start time + boot id) matches the live pid. */
  identified: boolean;
  /** Why it is not identified, or why it counts as dead; empty when identified. */
  reason: string;
  spec?: StartShard;
  replicaId: string;
  servesHttp: boolean;
}
