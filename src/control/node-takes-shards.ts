import type { Inventory, Register } from '../gen/llmgw/v1/agent_pb.js';

/** The node conditions an agent refuses every new StartShard under (node-conditions.ts). */
const REFUSING_CONDITIONS: ReadonlySet<string> = new Set(['Cordoned', 'DiskPressure']);

/**
 * Whether placement may put a shard on this node: not while it is cordoned
 * or under disk pressure, as the scheduler skips a node with kubelet's
 * unschedulable or disk-pressure taint. Placing there anyway would only be
 * refused, and retried, for as long as the condition holds. The latest
 * Inventory's conditions are the current word (a cordon can be lifted
 * mid-session); Register's cordoned flag stands for an agent that sends none.
 */
export function nodeTakesShards(register: Pick<Register, 'cordoned'>, inventory: Pick<Inventory, 'conditions'>): boolean {
  if (inventory.conditions.length > 0) return !inventory.conditions.some((c) => c.active && REFUSING_CONDITIONS.has(c.type));
  return !register.cordoned;
}

/** Why a node takes no new shard: its active refusing conditions with their reasons ("DiskPressure: log_dir … free"), or Cordoned. */
export function refusingConditions(register: Pick<Register, 'cordoned'>, inventory: Pick<Inventory, 'conditions'>): string {
  const active = inventory.conditions.filter((c) => c.active && REFUSING_CONDITIONS.has(c.type));
  if (active.length === 0) return register.cordoned ? 'Cordoned' : 'none';
  return active.map((c) => (c.reason ? `${c.type}: ${c.reason}` : c.type)).join('; ');
}
