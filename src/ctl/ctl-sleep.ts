import type { ShardInfoJson, SleepResponseJson, WakeResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { formatDuration } from '../lib/duration.js';
import { parseShardId } from '../lib/shard-id.js';
import { callUnaryJson } from './call-unary-json.js';
import { enumLabel } from './enum-label.js';

/** How long `ctl sleep` and `ctl wake` wait for the agent's answer: a level-2 wake reloads the weights. */
export const DEFAULT_SLEEP_TIMEOUT_MS = 5 * 60_000;

/** Puts a READY shard to sleep at `level`; the answer comes once its GPU memory is released, or is the refusal. */
export function ctlSleep(socket: string, shardId: string, level: 1 | 2, timeoutMs = DEFAULT_SLEEP_TIMEOUT_MS): Promise<SleepResponseJson> {
  // Checked here, as ctl drain and ctl logs check theirs: "a/b" is a usage error (exit 2) with or without an agent.
  parseShardId(shardId);
  return callUnaryJson<SleepResponseJson>(socket, 'Sleep', { shardId, level }, { timeoutMs });
}

/** Wakes a SLEEPING shard; the answer comes once it is READY with its known answer, or is the refusal. */
export function ctlWake(socket: string, shardId: string, timeoutMs = DEFAULT_SLEEP_TIMEOUT_MS): Promise<WakeResponseJson> {
  parseShardId(shardId);
  return callUnaryJson<WakeResponseJson>(socket, 'Wake', { shardId }, { timeoutMs });
}

/** One line: what the shard is now, and what to run next. */
export function describeSleep(what: 'sleep' | 'wake', shard: ShardInfoJson | undefined, tookMs: number): string {
  const state = enumLabel(shard?.state, 'SHARD_STATE_') || '?';
  const id = shard?.shardId ?? '?';
  const took = formatDuration(Math.round(tookMs));
  if (what === 'sleep') return `shard ${id} is ${state} after ${took}: its GPU memory is free and traffic goes elsewhere; llmgw ctl wake ${id} brings it back`;
  return `shard ${id} is ${state} after ${took}${shard?.error ? ` (${shard.error})` : ': it answers again with its known answer'}`;
}
