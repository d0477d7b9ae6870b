import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { AdapterLimits, EngineAdapterApi } from '../../lib/engine-adapter-api.js';
import type { EngineSleepApi } from '../../lib/engine-sleep-api.js';
import type { AdapterConfigFeatures } from '../../models/adapters/adapter-files.js';
import type { EngineConfig } from '../config/agent-config.js';
import type { Engine } from './engine.js';
import type { EngineMetrics } from './engine-metrics.js';
import type { AskOptions } from './known-answer-options.js';

/**
 * How an agent older than the recorded EngineWatch watched an engine of
 * this kind: what this agent derives for a state file that kept only two
 * metric names, or (before issue 50) no sleep API (orphans/legacy-watch.ts).
 */
export interface LegacyWatchFacts {
  /** The API rank's health path, and its probe timeout (0: the default). */
  healthPath: string;
  probeTimeoutMs: number;
  /** Its metric names; none: the two the old file recorded are kept. */
  metrics?: EngineMetrics;
  /** The environment variable that gives its API key when its args do not (engineApiKey); none: only its args. */
  apiKeyEnv?: string;
  /** Its admin API key, read off its args; none: it has no admin key. */
  adminApiKey?: (args: readonly string[]) => string;
  /** The sleep API its API rank was launched with; none: it has none to sleep through. */
  sleepApi?: EngineSleepApi;
}

/** How an engine kind serves LoRA adapters (EngineKind.adapters). */
export interface EngineAdapters {
  api: EngineAdapterApi;
  /**
   * The flags and environment a start with adapters needs, from the
   * profile's limits (vLLM: --enable-lora --max-loras N --max-lora-rank R,
   * env VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; SGLang: --enable-lora
   * --max-loaded-loras N --max-lora-rank R ...), each with its source line
   * in the wing.
   */
  launch(limits: AdapterLimits): { args: string[]; env: Record<string, string> };
  /** The limits read off a profile's own engine args when the profile sets them (e.g. --max-loras 4). */
  limitsFromArgs(args: readonly string[]): Partial<AdapterLimits>;
  /** What of an adapter's adapter_config.json this engine refuses to load, in its words; undefined when it loads it. Each refusal with its source line in the wing. */
  refusesConfig?(features: AdapterConfigFeatures): string | undefined;
}

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
   * How the compile folder a start used is told once it is READY
   * (models/compile-claims.ts): 'said-in-log', the engine names it in its
   * log ("Using cache directory", or that the cache is off); 'newest-folder',
   * the compileDirs folder written during the start. None: it compiles nothing.
   */
  compileInUse?: 'said-in-log' | 'newest-folder';
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
  /** What the known-answer ask adds for a shard of this kind beyond a plain completion (supervisor/probes/known-answer-ask.ts); none: a plain completion. */
  knownAnswerAsk?: (spec: StartShard) => AskOptions;
  /** How an older agent watched an engine of this kind (LegacyWatchFacts). */
  legacy: LegacyWatchFacts;
  /**
   * Whether a sleep is judged survivable (sleep-survival.ts) by the engine's
   * version read before the sleep, not only the one said at READY: vLLM's
   * survival depends on its version, and an adopted engine's may be unread.
   */
  sleepSurvivalReadsVersion?: boolean;
  /** none: this kind serves no adapters (the sim); a shard asking for adapters on it is refused in one line */
  adapters?: EngineAdapters;
}
