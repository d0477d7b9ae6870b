import { LlmgwError } from './errors.js';
import type { StartShard } from '../gen/llmgw/v1/agent_pb.js';

/** A shard id names files on disk, so it is held to a strict alphabet. */
export const SHARD_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

declare const checked: unique symbol;

/**
 * A shard id that was checked against SHARD_ID_PATTERN. Only parseShardId
 * and isValidShardId make one, and they are called at the edges where ids
 * come in (a control message, an admin call, a state file, a command line):
 * the supervisor and everything under it take a ShardId, so no id reaches a
 * path unchecked and nothing inside checks again.
 */
export type ShardId = string & { readonly [checked]: true };

export function isValidShardId(id: unknown): id is ShardId {
  return typeof id === 'string' && SHARD_ID_PATTERN.test(id);
}

/** `id` as a ShardId; a usage error naming the alphabet otherwise. An id like "../x" would name a file outside the state and log directories. */
export function parseShardId(id: unknown): ShardId {
  if (isValidShardId(id)) return id;
  throw new LlmgwError('usage', `invalid shard id ${quoteShardId(id)}: use 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit`);
}

/** An untrusted id as a message may show it: quoted, and cut short. */
export function quoteShardId(id: unknown): string {
  if (typeof id !== 'string') return String(id);
  return JSON.stringify(id.length > 40 ? `${id.slice(0, 40)}…` : id);
}

/** A StartShard whose shard id was parsed (parseStartShard): what the supervisor launches. */
export type CheckedStartShard = StartShard & { readonly shardId: ShardId };

/** `spec` with its shard id checked (parseShardId), unchanged otherwise. */
export function parseStartShard(spec: StartShard): CheckedStartShard {
  parseShardId(spec.shardId);
  return spec as CheckedStartShard;
}
