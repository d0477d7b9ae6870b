import type { Inventory, Register, ShardState } from '../gen/llmgw/v1/agent_pb.js';

export interface GpuView {
  index: number;
  name: string;
  computeCapability: string;
  healthy: boolean;
  memoryTotalMb: number;
  /** From the latest heartbeat, else from the inventory. */
  memoryUsedMb: number;
  /** The shard the control plane placed on this GPU, if any. */
  shardId?: string;
}

export interface NodeShardView {
  shardId: string;
  replicaId: string;
  /** The last state the node reported for it (from running_shards or ShardStatus). */
  state: ShardState;
  stateName: string;
}

export interface NodeView {
  id: string;
  hostname: string;
  mgmtAddr: string;
  version: string;
  labels: Record<string, string>;
  connected: boolean;
  /** When the current stream registered (or the last one, when disconnected). */
  connectedSince?: Date;
  disconnectedAt?: Date;
  lastHeartbeatAt?: Date;
  inventory: {
    gpuCount: number;
    healthyGpuCount: number;
    driverVersion: string;
    cudaVersion: string;
    hcaCount: number;
    warnings: string[];
  };
  gpus: GpuView[];
  /** Healthy GPUs no placed shard uses. */
  freeGpus: number[];
  shards: NodeShardView[];
}

/** What the control plane keeps about a node; NodeView is its public face. */
export interface NodeRecord {
  id: string;
  register: Register;
  inventory: Inventory;
  connected: boolean;
  connectedSince?: Date;
  disconnectedAt?: Date;
  lastHeartbeatAt?: Date;
  /** Fresh readings from heartbeats, in inventory order. */
  gpuMemoryUsedMb: number[];
  /** Every shard the node has told us about, by id; rank and nnodes when its running_shards entry gave them. */
  shards: Map<string, { replicaId: string; state: ShardState; rank?: number; nnodes?: number }>;
}
