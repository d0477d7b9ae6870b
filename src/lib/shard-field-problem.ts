/** One field of a StartShard that no StartShard may carry, and the one-line reason, which never quotes an oversized or unprintable value. */
export interface ShardFieldProblem {
  /** As the proto spells it: `pool`, `profile.served_model_name`, `hcas[1]`. */
  field: string;
  /** Names the field: "pool is 12582912 bytes; at most 256 are accepted". */
  message: string;
}
