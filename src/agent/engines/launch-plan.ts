/**
 * What to execute for one rank of a shard. The engine registry builds it; the
 * supervisor runs it.
 */
export interface LaunchPlan {
  /** argv[0] is the executable; never a shell string, so nothing in it is interpreted. */
  argv: string[];
  /** Variables set on top of the agent's environment (see engineEnv). */
  env: Record<string, string>;
}
