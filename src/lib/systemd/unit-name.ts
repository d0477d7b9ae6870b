/**
 * The engine unit of a shard, with its type: a shard id is
 * [A-Za-z0-9._-], all of which systemd allows in a unit name unescaped, so
 * no systemd-escape is needed. The `.service` suffix is always given: a
 * shard id ending in ".socket" would otherwise name a socket unit.
 */
export const systemdUnitName = (shardId: string) => `llmgw-shard-${shardId}.service`;
