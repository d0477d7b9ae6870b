import type { InventoryJson } from '../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../lib/duration.js';

/** Models `ctl status` lists by warmth, the most recently measured; --json has them all. */
export const WARMTH_LINES = 5;

type WarmthJson = NonNullable<InventoryJson['warmth']>[number];

/** "sim/m (sim, sim-small): serving now; to READY from store 41.2s (×3), from hub 365s (×1); 70000 MiB on 1 GPU at READY". */
export function describeWarmth(w: WarmthJson): string {
  const learned = (w.learned ?? []).map((t) => {
    const d = formatDuration(Math.round(Number(t.medianSeconds ?? 0) * 1000));
    return t.basis ? `from ${t.from} ~${d} (modelled: ${t.basis})` : `from ${t.from} ${d} (×${t.samples ?? 0})`;
  });
  const gpus = Number(w.gpuMemoryAtReadyGpus ?? 0);
  const memory = gpus > 0 ? `; ${w.gpuMemoryAtReadyMib ?? 0} MiB on ${gpus} GPU${gpus === 1 ? '' : 's'} at READY` : '';
  return `${w.model} (${w.engine}, ${w.profile || 'no profile'}): ${w.rung} now${learned.length > 0 ? `; to READY ${learned.join(', ')}` : ''}${memory}`;
}

/** The warmth lines of `ctl status`: at most WARMTH_LINES, then how many more there are. */
export function warmthLines(inv: InventoryJson): string[] {
  const all = inv.warmth ?? [];
  const lines = all.slice(0, WARMTH_LINES).map(describeWarmth);
  if (all.length > WARMTH_LINES) lines.push(`${all.length - WARMTH_LINES} more: ctl status --json`);
  return lines;
}
