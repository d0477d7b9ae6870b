import { LlmgwError } from './errors.js';

/** A shard id names files on disk, so it is held to a strict alphabet. */
export const SHARD_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function isValidShardId(id: unknown): id is string {
  return typeof id === 'string' && SHARD_ID_PATTERN.test(id);
}

/**
 * Throws unless `id` is a valid shard id. Called before anything touches the
 * state or log directory: an id like "../x" would otherwise name a file
 * outside them.
 */
export function assertShardId(id: unknown): asserts id is string {
  if (isValidShardId(id)) return;
  const shown = typeof id === 'string' ? JSON.stringify(id.length > 40 ? `${id.slice(0, 40)}…` : id) : String(id);
  throw new LlmgwError(
    'usage',
    `invalid shard id ${shown}: use 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit`,
  );
}
