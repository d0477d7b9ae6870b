import type { DeploymentReplica } from './deployment.js';
import type { ReplicaPhase, ShardView } from './replica-view.js';

/** A shard as the reconciler keeps it: what its view shows (less the derived stateName), and its startup timer. */
export interface ShardRecord extends Omit<ShardView, 'stateName'> {
  startupTimer?: NodeJS.Timeout;
}

/** A replica as the reconciler keeps it; ReplicaView is its public face. */
export interface ReplicaRecord {
  spec: DeploymentReplica;
  phase: ReplicaPhase;
  generation: number;
  /** Shards of the current generation, by rank order once complete. */
  shards: ShardRecord[];
  lastError?: string;
  retryTimer?: NodeJS.Timeout;
  /** Failed generations in a row (crash-loop backoff); reset after READY for stableReadyMs. */
  failures?: number;
  /** When the replica last became ready; undefined while it has not since its last failure. */
  readyAtMs?: number;
  /** When the next placement after a backoff is due (epoch ms), for views and logs. */
  nextRetryAtMs?: number;
  waitTimer?: NodeJS.Timeout;
}
