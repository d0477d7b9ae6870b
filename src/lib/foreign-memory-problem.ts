import type { Gpu, GpuProcess } from '../gen/llmgw/v1/agent_pb.js';

/**
 * The share of a GPU's memory that may be in use with no process to show
 * for it before the GPU is flagged: an idle GPU reports a few MiB (driver
 * and context reservations), while another container or a leaked CUDA
 * context holds gigabytes, and an engine placed there runs out of memory
 * minutes into loading. 5% of an 80 GB GPU is 4 GB.
 */
export const DEFAULT_FOREIGN_MEMORY_SHARE = 0.05;

/**
 * Why this GPU's memory is used by something the agent cannot see, or
 * undefined when it is not (beyond `share` of its total). "Cannot see" is
 * memory used minus what every listed compute process on the GPU holds,
 * whoever owns those: a foreign process that is listed is the
 * foreign-processes check's finding, not this one. Pure, so `discover`'s
 * preflight and StartShard validation give the same answer.
 */
export function foreignMemoryProblem(gpu: Gpu, processes: readonly GpuProcess[], share: number = DEFAULT_FOREIGN_MEMORY_SHARE): string | undefined {
  if (!(share >= 0 && share <= 1)) throw new RangeError(`foreign memory share must be between 0 and 1, got ${share}`);
  if (gpu.memoryTotalMb <= 0) return undefined;
  const visible = processes.filter((p) => p.gpuUuid === gpu.uuid).reduce((sum, p) => sum + Math.max(0, p.usedMemoryMb), 0);
  const unseen = gpu.memoryUsedMb - visible;
  if (unseen <= share * gpu.memoryTotalMb) return undefined;
  const pct = (n: number) => `${Math.round((100 * n) / gpu.memoryTotalMb)}%`;
  const held = visible > 0 ? `the processes listed on it hold ${visible} MiB` : 'no process listed on it';
  return (
    `GPU ${gpu.index}: ${gpu.memoryUsedMb} of ${gpu.memoryTotalMb} MiB used and ${held}, ` +
    `so ${unseen} MiB (${pct(unseen)}) is used by nothing this node can see, more than the ${Math.round(share * 100)}% allowed ` +
    '(another container or a leaked CUDA context: find it with nvidia-smi on the host, or free the GPU)'
  );
}
