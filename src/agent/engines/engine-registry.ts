import { ENGINE_NAMES, type EngineName, isEngineName } from '../../lib/engine-names.js';
import { failure } from '../../lib/errors.js';
import type { AgentConfig } from '../config/agent-config.js';
import type { ConfiguredEngine } from './configured-engine.js';
import type { Engine } from './engine.js';
import type { EngineAccount } from './engine-account.js';
import { ENGINE_CATALOG } from './engine-catalog.js';

export interface EngineRegistryOptions {
  /** engines.<name> from config: command, env, extra_args, allowed_env, user, enabled. */
  engines: AgentConfig['engines'];
  /** NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME of every engine. */
  mgmtInterface: string;
  /** supervisor.stop_grace, which vLLM's drain (--shutdown-timeout) must end before. */
  stopGraceMs?: number;
  /** This node's management address (VLLM_HOST_IP of every vLLM rank); '' when unknown. */
  mgmtAddr?: string;
  /** models.cache_dir: the node-local model store the engines are given as their caches; none when empty or absent. */
  modelsCacheDir?: string;
  /** models.hub.endpoint: where an engine that starts online downloads from. */
  modelsHubEndpoint?: string;
}

/**
 * The engines this agent can start, by the name a Profile gives. Only the
 * enabled ones are registered, from the catalog (EngineKind.enabledByDefault:
 * `sim`, a Node.js program which a control plane could otherwise ask for on
 * any production node, only with engines.sim.enabled: true).
 */
export class EngineRegistry {
  readonly #engines: ReadonlyMap<EngineName, Engine>;

  constructor(opts: EngineRegistryOptions) {
    const all: Engine[] = [];
    for (const name of ENGINE_NAMES) {
      const kind = ENGINE_CATALOG[name];
      const config = opts.engines[name];
      if (config?.enabled ?? kind.enabledByDefault) all.push(kind.create(config, { mgmtInterface: opts.mgmtInterface, stopGraceMs: opts.stopGraceMs, mgmtAddr: opts.mgmtAddr }));
    }
    if (opts.modelsCacheDir) for (const e of all) (e as Partial<Pick<ConfiguredEngine, 'useModelStore'>>).useModelStore?.(opts.modelsCacheDir, opts.modelsHubEndpoint);
    this.#engines = new Map(all.map((e) => [e.name, e]));
  }

  /** The registered engines' names, in a stable order. */
  names(): EngineName[] {
    return [...this.#engines.keys()];
  }

  /** Who each registered engine runs as under an agent running as `agentUid`, in names() order. */
  accounts(agentUid: number): EngineAccount[] {
    return [...this.#engines.values()].map((e) => e.account(agentUid));
  }

  /** Each registered engine's executable as this PATH resolves it, in names() order (discover's engine-command checks). */
  executables(): { engine: EngineName; command: string; path: string | undefined }[] {
    return [...this.#engines.values()].map((e) => ({ engine: e.name, ...e.executable() }));
  }

  /** Throws LlmgwError('failure') naming the registered engines for an unknown or disabled name. */
  get(name: string): Engine {
    const engine = this.#engines.get(name as EngineName);
    if (engine) return engine;
    const known = `known engines: ${this.names().join(', ') || 'none'}`;
    if (isEngineName(name)) {
      throw failure(`engine ${JSON.stringify(name)} is not enabled on this node (set engines.${name}.enabled: true in the agent's config); ${known}`);
    }
    throw failure(`unknown engine ${JSON.stringify(name)}; ${known}`);
  }
}
