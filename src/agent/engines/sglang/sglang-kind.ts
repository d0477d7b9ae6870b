import { engineAdminApiKey } from '../engine-api-key.js';
import type { EngineKind } from '../engine-kind.js';
import { SGLANG_ADAPTERS } from './sglang-adapters.js';
import { SGLANG_METRICS, SGLANG_PROBE_TIMEOUT_MS, SglangEngine } from './sglang-engine.js';
import { sglangKnownAnswerAsk } from './sglang-known-answer.js';
import { SGLANG_SLEEP_API } from './sglang-sleep.js';

/**
 * SGLang's compile folders under its cache (engineCacheEnv): its compile
 * cache under SGLANG_CACHE_DIR/torch_compile_cache (srt/compilation/backend.py),
 * and torch's Inductor and Triton kernels, which its backend redirects
 * there too (srt/compilation/compiler_interface.py). Before the wings the
 * store looked only in vLLM's folder, and an SGLang compile was never seen
 * (review architecture-4, 4.3).
 */
export const SGLANG_COMPILE_DIRS: readonly string[] = ['sglang/torch_compile_cache', 'torchinductor', 'triton'];

/** SGLang's wing, as the catalog knows it. */
export const SGLANG_KIND: EngineKind = {
  create: (config, ctx) => new SglangEngine(config, ctx.mgmtInterface, { mgmtAddr: ctx.mgmtAddr }),
  enabledByDefault: true,
  compileDirs: SGLANG_COMPILE_DIRS,
  compileInUse: 'newest-folder',
  // Open when no key is set (S:python/sglang/srt/utils/auth.py at 0ce3659c).
  keylessSleepEndpoints: "SGLang's /release_memory_occupation and /resume_memory_occupation",
  knownAnswerAsk: sglangKnownAnswerAsk,
  // /health_generate: its /health answers before the model does.
  legacy: { healthPath: '/health_generate', probeTimeoutMs: SGLANG_PROBE_TIMEOUT_MS, metrics: SGLANG_METRICS, adminApiKey: engineAdminApiKey, sleepApi: SGLANG_SLEEP_API },
  adapters: SGLANG_ADAPTERS,
};
