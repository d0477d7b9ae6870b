import type { InventoryJson, NodeConditionJson } from '../gen/llmgw/v1/agent_pb.js';
import { formatAge } from '../lib/format-age.js';

/**
 * The `conditions` line of `ctl status`: each node condition that holds
 * (DiskPressure, Cordoned), why and for how long, or "none" (new shards may
 * start). From Inventory.conditions; an older agent that sends none gets no line.
 */
export function describeNodeConditions(inventory: InventoryJson, nowMs: number): string | undefined {
  const all = inventory.conditions;
  if (!all || all.length === 0) return undefined;
  const held = all.filter((c) => c.active);
  if (held.length === 0) return 'none (new shards may start)';
  return `${held.map((c) => describeOne(c, nowMs)).join('; ')}: new shards are refused`;
}

function describeOne(c: NodeConditionJson, nowMs: number): string {
  const since = Date.parse(c.since ?? '');
  const age = Number.isNaN(since) ? '' : ` for ${formatAge(nowMs - since)}`;
  return `${c.type}${age}${c.reason ? ` (${c.reason})` : ''}`;
}

/**
 * Whether an Inventory warning only repeats a condition the conditions line
 * already shows: the agent puts each held condition in warnings too, for
 * readers of the string field alone (node-conditions.ts).
 */
export function repeatsCondition(warning: string, inventory: InventoryJson): boolean {
  if (!inventory.conditions?.some((c) => c.active)) return false;
  return warning.startsWith('disk pressure: ') || warning.startsWith('node is cordoned since ');
}
