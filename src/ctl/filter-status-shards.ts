import { ShardState } from '../gen/llmgw/v1/agent_pb.js';
import { usageError } from '../lib/errors.js';

/**
 * Which shards `ctl status` asks the agent for (StatusRequest.all, states):
 * by default those not ended (or whose engine may still run); `all`, every
 * one; `states`, only those. The agent filters: only it knows whether an
 * ended shard's engine may still run.
 */
export interface ShardFilter {
  all?: boolean;
  /** Proto JSON names, e.g. SHARD_STATE_FAILED (parseStateFilter). */
  states?: readonly string[];
}

/** The state names an operator may give, as the table prints them: STARTING, READY, …, FAILED. */
const STATE_NAMES: readonly string[] = Object.entries(ShardState)
  .filter(([, n]) => typeof n === 'number' && n !== ShardState.UNSPECIFIED)
  .map(([name]) => name);

/** `--state failed,exited` → ["SHARD_STATE_FAILED", "SHARD_STATE_EXITED"]; case-insensitive, SHARD_STATE_ optional. */
export function parseStateFilter(list: string): string[] {
  const names = list
    .split(',')
    .map((s) => s.trim().toUpperCase().replace(/^SHARD_STATE_/, ''))
    .filter((s) => s !== '');
  if (names.length === 0) throw usageError(`--state: name at least one state, e.g. --state failed,exited (states: ${STATE_NAMES.join(', ')})`);
  for (const n of names) {
    if (!STATE_NAMES.includes(n)) throw usageError(`--state: no shard state ${JSON.stringify(n)}; use one or more of ${STATE_NAMES.join(', ')}, comma-separated`);
  }
  return [...new Set(names)].map((n) => `SHARD_STATE_${n}`);
}
