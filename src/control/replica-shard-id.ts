const SHARD_GENERATION = /-g(\d+)-r\d+$/;

/**
 * `<replica>-g<generation>-r<rank>`: the generation in the id is what lets a
 * restarted control plane tell, from running_shards alone, which ranks belong
 * to one collective.
 */
export function replicaShardId(replicaId: string, generation: number, rank: number): string {
  return `${replicaId}-g${generation}-r${rank}`;
}

/** The generation a replicaShardId carries; undefined for an id of another form. */
export function generationOf(shardId: string): number | undefined {
  const m = SHARD_GENERATION.exec(shardId);
  return m ? Number(m[1]) : undefined;
}
