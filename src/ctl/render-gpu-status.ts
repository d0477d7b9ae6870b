import type { GpuStatusJson, StatusResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import type { GpuEventJson, GpuJson } from '../gen/llmgw/v1/agent_pb.js';
import { formatAge } from '../lib/format-age.js';
import { renderTable } from '../lib/table.js';

export const GPU_TABLE_HEADER = ['GPU', 'NAME', 'MEMORY', 'HEALTH', 'LAST EVENT'] as const;

/**
 * The GPU section of `ctl status`: one row per GPU of the inventory (its
 * latest memory reading, its health, its last event), then one line per
 * unhealthy GPU with the whole reason, since a table cell would cut the
 * sentence an operator acts on. Nothing for a node without GPUs.
 */
export function renderGpuStatus(s: StatusResponseJson, nowMs: number): string[] {
  const gpus = s.inventory?.gpus ?? [];
  if (gpus.length === 0) return [];
  const health = new Map((s.gpus ?? []).map((g) => [g.index ?? 0, g]));
  const views = gpus.map((g) => ({ gpu: g, health: health.get(g.index ?? 0) }));
  const lines = [renderTable(GPU_TABLE_HEADER, views.map((v) => gpuRow(v.gpu, v.health, nowMs)))];
  for (const { gpu, health: h } of views) {
    if (!isHealthy(gpu, h)) lines.push(`GPU ${gpu.index ?? 0}: ${h?.fault || gpu.error || 'unhealthy (no reason given)'}`);
    // Healthy hardware the agent still will not start on (foreign memory): its whole reason too.
    else if (h?.fault) lines.push(`GPU ${gpu.index ?? 0}: ${h.fault}`);
  }
  return lines;
}

/** The HEALTH cell: ok, UNHEALTHY, or what keeps healthy hardware from serving ("foreign memory 88%"). */
function healthCell(gpu: GpuJson, h: GpuStatusJson | undefined): string {
  if (!isHealthy(gpu, h)) return 'UNHEALTHY';
  if (!h?.fault) return 'ok';
  // The fault's head, before its sentence: "foreign memory 88% (no shard starts on it): GPU 3: …".
  return h.fault.split(/ \(|:/)[0] as string;
}

/** The agent's watch, when the response has it, knows more than the inventory's last scan. */
function isHealthy(gpu: GpuJson, h: GpuStatusJson | undefined): boolean {
  return h ? h.healthy === true : gpu.healthy === true;
}

function gpuRow(gpu: GpuJson, h: GpuStatusJson | undefined, nowMs: number): string[] {
  const used = h?.memoryUsedMb ?? gpu.memoryUsedMb ?? 0;
  const last = h?.recentEvents?.at(-1);
  return [
    String(gpu.index ?? 0),
    gpu.name || '-',
    // No total: the scan could not read the GPU's memory ("[GPU requires reset]"), and a used figure
    // beside it would be a stale reading from before the fault (walkthrough 4, O14: "1 / 0 MiB").
    gpu.memoryTotalMb ? `${used} / ${gpu.memoryTotalMb} MiB` : 'unreadable',
    healthCell(gpu, h),
    last ? describeGpuEvent(last, nowMs) : '-',
  ];
}

/** "Xid 79: GPU has fallen off the bus (nvml, 2m ago)". */
export function describeGpuEvent(e: GpuEventJson, nowMs: number): string {
  const at = Date.parse(e.at ?? '');
  const when = Number.isNaN(at) ? '' : `, ${formatAge(Math.max(0, nowMs - at))} ago`;
  return `${e.message || '?'} (${e.source || '?'}${when})`;
}
