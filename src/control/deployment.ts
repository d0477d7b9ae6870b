import type { EngineName } from '../lib/engine-names.js';
/**
 * The desired state of the reference control plane: named engine profiles and
 * the replicas that run them. Loaded from YAML by load-deployment.ts; every
 * replica group is already expanded into one entry per replica id.
 */


/**
 * How warm the reference control plane keeps a profile's model on every node
 * that may run it (issue 39): none; disk (a PrefetchModel when the node
 * registers: its store holds the model complete, so a start loads offline);
 * page-cache (the same, then read into the page cache: PrefetchModel.page_cache).
 */
export const PREFETCH_RUNGS = ['none', 'disk', 'page-cache'] as const;
export type PrefetchRung = (typeof PREFETCH_RUNGS)[number];

/** The startup timeout of a profile that does not set one: long enough for a large model's first load. */
export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

export interface DeploymentProfile {
  name: string;
  /** One of ENGINE_NAMES, which the agent's engine catalog is keyed by. */
  engine: EngineName;
  model: string;
  /** What /v1/models must list before a shard is Ready; the model when not set. */
  servedModelName: string;
  tensorParallelSize: number;
  pipelineParallelSize: number;
  args: string[];
  env: Record<string, string>;
  /** How long a shard may take to become Ready before it is stopped and retried. */
  startupTimeoutMs: number;
  /** "8.0"; empty means any GPU. */
  minComputeCapability: string;
  /** Profile.sleep_mode: shards may sleep and wake (the agent adds the engine's sleep flags). */
  sleepMode?: boolean;
  /** Kept warm on the nodes that may run it (PREFETCH_RUNGS); none when absent. */
  prefetch?: PrefetchRung;
}

export interface DeploymentReplica {
  /** Unique replica id; shard ids are made from it (`<id>-g<generation>-r<rank>`). */
  id: string;
  /** The `name` of the replicas entry this replica was expanded from. */
  group: string;
  profile: DeploymentProfile;
  /** GPUs each shard (one per node) is given; 0 for engines that need none (sim on a laptop). */
  gpusPerShard: number;
  /** Nodes the replica spans; one shard per node, rank 0 is the leader. */
  nnodes: number;
  /** Only nodes whose `pool` label equals this; any node when empty. */
  pool: string;
  /** Passed through to StartShard.fabric; not used for placement. */
  fabric: string;
}

export interface Deployment {
  /** The file it was loaded from, for log lines; absent when built in code. */
  path?: string;
  profiles: ReadonlyMap<string, DeploymentProfile>;
  replicas: readonly DeploymentReplica[];
}
