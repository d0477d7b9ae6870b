import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';

/** A GPU the watch knows: index, uuid and bus id (to place kernel-log Xids). */
export interface WatchedGpu {
  index: number;
  uuid: string;
  pciBusId: string;
  /**
   * Why the inventory's scan calls it unhealthy (nvidia-smi's "GPU requires
   * reset"), or undefined when it does not. Held as a fault when there is no
   * NVML to poll: then the scan is the only word on the GPU's health.
   */
  discoveryFault?: string;
}

/** The GPUs of an inventory as the health watch knows them. */
export function watchedGpus(inventory: Inventory): WatchedGpu[] {
  return inventory.gpus.map((g) => ({ index: g.index, uuid: g.uuid, pciBusId: g.pciBusId, ...(g.healthy ? {} : { discoveryFault: g.error || 'unhealthy in the inventory' }) }));
}
