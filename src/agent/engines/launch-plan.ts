import type { EngineUser } from '../config/agent-config.js';
import type { RankPlacement } from './rank-placement.js';

/**
 * What to execute for one rank of a shard. The engine registry builds it; the
 * supervisor runs it.
 */
export interface LaunchPlan {
  /**
   * argv[0] is the executable, an absolute path resolved at validation with
   * the agent's PATH (never the profile's); never a shell string, so nothing
   * in it is interpreted.
   */
  argv: string[];
  /** Variables set on top of the agent's environment (see engineEnv). */
  env: Record<string, string>;
  /** engines.<name>.user, looked up when the config was loaded; absent: the agent's own user. */
  user?: EngineUser;
  /**
   * A multi-node rank's CPUs and NUMA node (rank-placement.ts): CPUAffinity=
   * and NUMAPolicy=bind under systemd-run, `taskset -c` (at `taskset`, its
   * path) with the direct launcher. The operator's unit_properties win.
   */
  placement?: RankPlacement & { taskset?: string };
}
