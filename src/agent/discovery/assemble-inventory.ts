import { create } from '@bufbuild/protobuf';
import { type Inventory, InventorySchema } from '../../gen/llmgw/v1/agent_pb.js';
import type { HcaProbe } from './probe-hcas.js';
import type { GpuProbe } from './probe-gpus.js';
import type { NetworkProbe } from './probe-network.js';
import type { TopologyProbe } from './probe-topology.js';

export interface InventoryParts {
  gpus: GpuProbe;
  /** Absent when it was not probed (no driver). */
  topology?: TopologyProbe;
  hcas: HcaProbe;
  network: NetworkProbe;
}

/**
 * One Inventory from the probes' results, the same way for `discover()` and
 * for `llmgw discover`'s task list. A GPU whose NUMA node sysfs did not give
 * takes it from topo -m.
 */
export function assembleInventory(parts: InventoryParts): Inventory {
  const gpus = parts.gpus.gpus;
  for (const gpu of gpus) {
    const numa = parts.topology?.gpuNuma.get(gpu.index);
    if (gpu.numaNode < 0 && numa !== undefined) gpu.numaNode = numa;
    gpu.cpuAffinity = parts.topology?.gpuCpus?.get(gpu.index) ?? gpu.cpuAffinity;
  }
  return create(InventorySchema, {
    gpus,
    links: parts.topology?.links ?? [],
    hcas: parts.hcas.hcas,
    interfaces: parts.network.interfaces,
    driverVersion: parts.gpus.driverVersion,
    cudaVersion: parts.gpus.cudaVersion,
    warnings: [...parts.gpus.warnings, ...(parts.topology?.warnings ?? []), ...parts.hcas.warnings, ...parts.network.warnings],
    hostname: parts.network.hostname,
    processes: parts.gpus.processes,
  });
}
