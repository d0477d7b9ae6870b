import { ENGINE_NAMES, type AgentConfig, type EngineName } from '../config/agent-config.js';
import { failure } from '../../lib/errors.js';
import type { Engine } from './engine.js';
import { SglangEngine } from './sglang-engine.js';
import { SimEngine } from './sim-engine.js';
import { VllmEngine } from './vllm-engine.js';

export interface EngineRegistryOptions {
  /** engines.<name> from config: command, env, extra_args. */
  engines: AgentConfig['engines'];
  /** NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME of every engine. */
  mgmtInterface: string;
  /** supervisor.stop_grace, which vLLM's drain (--shutdown-timeout) must end before. */
  stopGraceMs?: number;
}

/** The engines this agent can start, by the name a Profile gives. */
export class EngineRegistry {
  readonly #engines: ReadonlyMap<EngineName, Engine>;

  constructor(opts: EngineRegistryOptions) {
    this.#engines = new Map<EngineName, Engine>([
      ['vllm', new VllmEngine(opts.engines.vllm, opts.mgmtInterface, { stopGraceMs: opts.stopGraceMs })],
      ['sglang', new SglangEngine(opts.engines.sglang, opts.mgmtInterface)],
      ['sim', new SimEngine(opts.engines.sim, opts.mgmtInterface)],
    ]);
  }

  /** Throws LlmgwError('failure') naming the known engines for an unknown name. */
  get(name: string): Engine {
    const engine = this.#engines.get(name as EngineName);
    if (!engine) throw failure(`unknown engine ${JSON.stringify(name)}; known engines: ${ENGINE_NAMES.join(', ')}`);
    return engine;
  }
}
