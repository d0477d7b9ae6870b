/**
 * What to execute for one shard: an argv array (never a shell string) and the
 * complete environment. The engine registry builds it; the supervisor runs it.
 */
export interface LaunchPlan {
  argv: string[];
  env: Record<string, string>;
}
