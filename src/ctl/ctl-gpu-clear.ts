import type { ClearGpuFaultResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { callUnaryJson } from './call-unary-json.js';

/** Asks the agent to forget GPU `gpuIndex`'s faults; the agent logs who asked (its uid) and tells the control plane. */
export function ctlGpuClear(socket: string, gpuIndex: number, reason: string): Promise<ClearGpuFaultResponseJson> {
  return callUnaryJson<ClearGpuFaultResponseJson>(socket, 'ClearGpuFault', { gpuIndex, reason });
}

/** One line for the operator: what was cleared, or that there was nothing to. */
export function describeGpuClear(gpuIndex: number, response: ClearGpuFaultResponseJson): string {
  const cleared = response.cleared ?? [];
  if (cleared.length === 0) return `GPU ${gpuIndex} had no fault; nothing cleared`;
  return `GPU ${gpuIndex}: cleared ${cleared.join('; ')}; new shards may use it, and the control plane is told`;
}
