import { join } from 'node:path';
import { StoreLayout } from './store-layout.js';

export interface EngineCacheEnvInput {
  /** models.cache_dir; '' (store off) gives no variables. */
  cacheDir: string;
  /** Everything the engine reads at start is in the store (judgeOfflineStart): it may run offline. */
  modelComplete: boolean;
}

/**
 * The environment that points an engine at the node's store, so a second
 * start of a model reads its weights from local disk and reuses its compiled
 * graphs instead of rebuilding them (issue 30: torch.compile's cache thrown
 * away cost 166 s a start). Each name, and who reads it:
 *
 * - HF_HUB_CACHE: huggingface_hub's hub cache (constants.py HF_HUB_CACHE),
 *   which vLLM and SGLang load weights through. Not HF_HOME, which would
 *   move the engine's token file too (constants.py: HF_TOKEN_PATH defaults
 *   to $HF_HOME/token): an engine that must go online would no longer find
 *   the token `huggingface-cli login` saved for its user, and a gated repo
 *   would answer 401 (engine-fidelity review 2, N6).
 * - HF_HUB_OFFLINE=1, only when everything the engine reads at start is
 *   here (judgeOfflineStart): huggingface_hub then makes no request at all
 *   and resolves the revision from refs/ (constants.py HF_HUB_OFFLINE;
 *   file_download.py try_to_load_from_cache). Set when a file is missing it
 *   fails the start instead of fetching.
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
    HF_HUB_CACHE: layout.hubDir,
    VLLM_CACHE_ROOT: join(compile, 'vllm'),
    SGLANG_CACHE_DIR: join(compile, 'sglang'),
    TORCHINDUCTOR_CACHE_DIR: join(compile, 'torchinductor'),
    TRITON_CACHE_DIR: join(compile, 'triton'),
    ...(input.modelComplete ? { HF_HUB_OFFLINE: '1' } : {}),
  };
}

/** huggingface_hub's reading of HF_HUB_OFFLINE (constants.py _is_true): 1, ON, YES or TRUE in any case. */
export function isHubOffline(env: Readonly<Record<string, string | undefined>>): boolean {
  return ['1', 'ON', 'YES', 'TRUE'].includes((env.HF_HUB_OFFLINE ?? '').toUpperCase());
}
