import type { EngineSleepApi } from '../../lib/engine-sleep-api.js';
import type { EngineWatch } from '../../lib/engine-watch.js';
import type { GpuProcess, Inventory, StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineName } from '../../lib/engine-names.js';
import type { EngineAccount } from './engine-account.js';
import type { LaunchPlan } from './launch-plan.js';

export type { LaunchPlan };

/** What validation judges a shard against: this node as it is now. */
export interface ValidationContext {
  inventory: Inventory;
  /** GPU index → shard id of ANOTHER live shard holding it. */
  heldGpus: ReadonlyMap<number, string>;
  /** Compute processes no shard owns. */
  foreignProcesses: readonly GpuProcess[];
  isPortFree(port: number): Promise<boolean>;
  /** The agent's uid (process.getuid()): a root agent refuses an engine that would run as root without allow_root. */
  agentUid: number;
}

export interface Engine {
  readonly name: EngineName;
  /**
   * Throws LlmgwError('failure', '<one line naming the problem>') before
   * anything is launched: a refusal after minutes of model loading is the
   * failure validation exists to prevent. Resolves the executable once, with
   * the agent's PATH; command() of the same spec object runs that file.
   */
  validate(spec: StartShard, ctx: ValidationContext): Promise<void>;
  /** Throws LlmgwError('failure') when the executable cannot be found. */
  command(spec: StartShard): LaunchPlan;
  /**
   * Why validate() found that this start cannot run offline from the node's
   * model store (a partial pull, a tokenizer repo not pulled), so it runs
   * online; undefined when it runs offline, or there is no store.
   */
  onlineReason?(spec: StartShard): string | undefined;
  /**
   * Of onlineReason, only what the node's store lacks of the hub repos the
   * engine reads (what a node without a hub cannot start), with those repos;
   * undefined otherwise.
   */
  storeShortfall?(spec: StartShard): { reason: string; repos: string[] } | undefined;
  /** Who this engine's processes run as under an agent running as `agentUid`, and whether that refuses its starts. */
  account(agentUid: number): EngineAccount;
  /** Its argv[0] (engines.<name>.command's, or the default) and the file that resolves to on this PATH; undefined when none does. */
  executable(): { command: string; path: string | undefined };
  /**
   * Whether this worker rank listens on a port of its own (SGLang's /health
   * on --host:--port): given none by the control plane (http_port 0), the
   * agent chooses one before the start is admitted.
   */
  workerListens(spec: StartShard): boolean;
  /** Whether this rank opens the HTTP API: every single-node shard, rank 0 only for multi-node. */
  servesHttp(spec: StartShard): boolean;
  /**
   * How the supervisor judges this rank once `plan` (this engine's command()
   * of the same spec) runs: probe port, path and limit, readiness test, the
   * series a drain and stall detection read, the API key its probes send.
   */
  watch(spec: StartShard, plan: LaunchPlan): EngineWatch;
  /** What the operator is told at every start of `plan` (this engine's command()), one log line each; none: nothing. */
  startWarnings?(plan: LaunchPlan): string[];
  /** How it sleeps and wakes (its wing's), which watch() records for the API rank; none: it does not sleep. */
  readonly sleepApi?: EngineSleepApi;
}
