import { create } from '@bufbuild/protobuf';
import { type Gpu, MigDeviceSchema } from '../../gen/llmgw/v1/agent_pb.js';
import type { ListedGpu } from './parse-gpu-list.js';

/**
 * What `nvidia-smi -L` adds to GPUs found another way (--query-gpu or NVML):
 * their MIG devices, which appear nowhere else, and a name where the other
 * source gave none. A GPU is matched by UUID, by index only when its UUID is
 * unknown: indexes follow the enumeration order, which two tools need not share.
 */
export function mergeGpuList(gpus: Gpu[], listed: readonly ListedGpu[]): void {
  for (const gpu of gpus) {
    const l = listed.find((x) => (gpu.uuid !== '' ? x.uuid === gpu.uuid : x.index === gpu.index));
    if (!l) continue;
    if (gpu.name === '') gpu.name = l.name;
    gpu.migDevices = l.migDevices.map((m) => create(MigDeviceSchema, m));
  }
}
