import type { EngineKind } from '../engine-kind.js';
import { VLLM_ADAPTERS } from './vllm-adapters.js';
import { VLLM_METRICS, VllmEngine } from './vllm-engine.js';
import { VLLM_AGENT_FLAG_HINTS } from './vllm-exit.js';
import { vllmKnownAnswerAsk } from './vllm-known-answer.js';
import { VLLM_SLEEP_API } from './vllm-sleep.js';

/**
 * vLLM's compile folders under its cache (engineCacheEnv): its torch.compile
 * graphs under VLLM_CACHE_ROOT/torch_compile_cache (V:vllm/compilation/backends.py),
 * and torch's Inductor and Triton kernels, which its backend redirects
 * there too (vllm compiler_interface.py).
 */
export const VLLM_COMPILE_DIRS: readonly string[] = ['vllm/torch_compile_cache', 'torchinductor', 'triton'];

/** vLLM's wing, as the catalog knows it. */
export const VLLM_KIND: EngineKind = {
  create: (config, ctx) => new VllmEngine(config, ctx.mgmtInterface, { stopGraceMs: ctx.stopGraceMs, mgmtAddr: ctx.mgmtAddr }),
  enabledByDefault: true,
  compileDirs: VLLM_COMPILE_DIRS,
  compileInUse: 'said-in-log',
  agentFlagHints: VLLM_AGENT_FLAG_HINTS,
  // VLLM_SERVER_DEV_MODE's routes; its API key guards /v1 only (V:vllm/entrypoints/serve/middleware/authenticate.py:11,59).
  keylessSleepEndpoints: "vLLM's dev endpoints (/sleep, /wake_up, /collective_rpc, /reset_prefix_cache)",
  knownAnswerAsk: vllmKnownAnswerAsk,
  legacy: { healthPath: '/health', probeTimeoutMs: 0, metrics: VLLM_METRICS, apiKeyEnv: 'VLLM_API_KEY', sleepApi: VLLM_SLEEP_API },
  sleepSurvivalReadsVersion: true,
  adapters: VLLM_ADAPTERS,
};
