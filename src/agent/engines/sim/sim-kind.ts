import type { EngineKind } from '../engine-kind.js';
import { VLLM_METRICS } from '../vllm/vllm-engine.js';
import { SimEngine } from './sim-engine.js';

/** The sim's wing, as the catalog knows it: off unless engines.sim.enabled, and it compiles nothing. */
export const SIM_KIND: EngineKind = {
  create: (config, ctx) => new SimEngine(config, ctx.mgmtInterface),
  enabledByDefault: false,
  compileDirs: [],
  // The sim speaks vLLM's metrics and key variable; it has no sleep API of its own to have recorded.
  legacy: { healthPath: '/health', probeTimeoutMs: 0, metrics: VLLM_METRICS, apiKeyEnv: 'VLLM_API_KEY' },
};
