import type { EngineConfig } from '../config/agent-config.js';
import type { Engine } from './engine.js';

/** What the agent's config gives every kind's constructor beside engines.<name>. */
export interface EngineKindContext {
  /** NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME of every engine. */
  mgmtInterface: string;
  /** supervisor.stop_grace, which vLLM's drain (--shutdown-timeout) must end before. */
  stopGraceMs?: number;
  /** This node's management address (VLLM_HOST_IP of every vLLM rank); '' when unknown. */
  mgmtAddr?: string;
}

/**
 * One engine kind, as its wing (src/agent/engines/<name>/) gives it to the
 * catalog: how it is built, and the facts the agent needs of it before or
 * beside an instance. Everything an engine knows of its own command line,
 * sleep API, caches and exit lives in its wing; the generic machinery in
 * engines/ asks through this and the Engine interface, never by name.
 * Modelled on Nomad's plugin catalog (helper/pluginutils/catalog/register.go)
 * and connect-es's protocol folders.
 */
export interface EngineKind {
  /** The engine, from engines.<name> of the agent's config. */
  create(config: Partial<EngineConfig> | undefined, ctx: EngineKindContext): Engine;
  /**
   * Registered when engines.<name>.enabled is absent. The sim is not: a
   * Node.js program a control plane could otherwise ask for on any
   * production node.
   */
  enabledByDefault: boolean;
  /**
   * Folders under the engine's own cache (engineCacheEnv) that hold what it
   * compiled: a file in one is a compile cache a start can skip the
   * compile with (hasCompileCache). Relative to the cache's root.
   */
  compileDirs: readonly string[];
  /**
   * Why an engine of this kind refuses a flag the agent itself puts on its
   * command line, by the flag: said when it exits at argument parsing
   * (explainEngineExit). None: it refuses none the agent knows of.
   */
  agentFlagHints?: Readonly<Record<string, string>>;
  /**
   * What a sleep-mode engine of this kind serves on its API port without a
   * key, for the port guard's words (sleep-port-guards.ts); absent for a kind
   * whose sleep opens nothing to guard (the sim, a test double on dev nodes).
   */
  keylessSleepEndpoints?: string;
}
