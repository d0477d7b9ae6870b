import { join } from 'node:path';
import { StoreLayout } from './store-layout.js';

export interface EngineCacheEnvInput {
  /** models.cache_dir; '' (store off) gives no variables. */
  cacheDir: string;
  /** The shard's model is complete in the store (isModelComplete): the engine may run offline. */
  modelComplete: boolean;
}

/**
 * The environment that points an engine at the node's store, so a second
 * start of a model reads its weights from local disk and reuses its compiled
 * graphs instead of rebuilding them (issue 30: torch.compile's cache thrown
 * away cost 166 s a start). Each name, and who reads it:
 *
 * - HF_HOME, HF_HUB_CACHE: huggingface_hub (constants.py: HF_HUB_CACHE
 *   defaults to $HF_HOME/hub), which vLLM and SGLang load weights through.
 * - HF_HUB_OFFLINE=1, only once the model is complete here: huggingface_hub
 *   then makes no request at all and resolves the revision from refs/
 *   (constants.py HF_HUB_OFFLINE; file_download.py try_to_load_from_cache).
 *   Set when a file is missing it would fail the start instead of fetching.
 * - VLLM_CACHE_ROOT: vLLM's cache root, ~/.cache/vllm by default
 *   (vllm/envs.py); its torch.compile artefacts go under
 *   <root>/torch_compile_cache (vllm/compilation/backends.py).
 * - SGLANG_CACHE_DIR: SGLang's, ~/.cache/sglang by default
 *   (python/sglang/srt/environ.py); its compile cache goes under
 *   <dir>/torch_compile_cache (srt/compilation/backend.py).
 * - TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR: torch's own, which default to
 *   /tmp/torchinductor_<user> (torch/_inductor/runtime/cache_dir_utils.py),
 *   lost at a reboot or a tmp cleaner, for compiles outside the engines'
 *   backends (which redirect them under their own roots:
 *   srt/compilation/compiler_interface.py, vllm compiler_interface.py).
 *
 * Pure: the caller decides completeness and merges this under the
 * operator's engines.<name>.env, which wins.
 */
export function engineCacheEnv(input: EngineCacheEnvInput): Record<string, string> {
  if (input.cacheDir === '') return {};
  const layout = new StoreLayout(input.cacheDir);
  const compile = layout.compileDir;
  return {
    HF_HOME: input.cacheDir,
    HF_HUB_CACHE: layout.hubDir,
    VLLM_CACHE_ROOT: join(compile, 'vllm'),
    SGLANG_CACHE_DIR: join(compile, 'sglang'),
    TORCHINDUCTOR_CACHE_DIR: join(compile, 'torchinductor'),
    TRITON_CACHE_DIR: join(compile, 'triton'),
    ...(input.modelComplete ? { HF_HUB_OFFLINE: '1' } : {}),
  };
}
