import { create } from '@bufbuild/protobuf';
import { type GpuProcess, GpuProcessSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { parseMib, parseNvidiaCsv } from './parse-nvidia-csv.js';

/** process_name last: a path may contain commas, and the last field absorbs them. */
export const COMPUTE_APPS_FIELDS = ['pid', 'gpu_uuid', 'used_memory', 'process_name'] as const;

/**
 * `--query-compute-apps` CSV → GpuProcess. used_memory is `[N/A]` for
 * processes on MIG devices and in some containers; that reads as 0 MB, the
 * process is still listed (its pid is what matters). Accepts both
 * `used_memory` and nvidia-smi's other spelling, `used_gpu_memory`, so real
 * captures with a header parse too.
 */
export function parseComputeApps(text: string, fields?: readonly string[]): GpuProcess[] {
  const csv = parseNvidiaCsv(text, fields);
  const out: GpuProcess[] = [];
  for (const line of csv.lines) {
    if (line.kind !== 'row') continue;
    const c = line.cells;
    const pid = Number.parseInt(c.pid ?? '', 10);
    if (!Number.isInteger(pid)) continue;
    out.push(
      create(GpuProcessSchema, {
        pid,
        gpuUuid: c.gpu_uuid ?? '',
        usedMemoryMb: parseMib(c.used_memory ?? c.used_gpu_memory ?? '') ?? 0,
        processName: c.process_name ?? c.name ?? '',
      }),
    );
  }
  return out;
}
