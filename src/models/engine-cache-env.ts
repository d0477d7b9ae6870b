import { lchown, lstat, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { failure } from '../lib/errors.js';
import { StoreLayout } from './store-layout.js';

export interface EngineCacheEnvInput {
  /** models.cache_dir; '' (store off) gives no variables. */
  cacheDir: string;
  /** Everything the engine reads at start is in the store (judgeOfflineStart): it may run offline. */
  modelComplete: boolean;
  /**
   * The engine's own compile cache for this model (StoreLayout.engineCacheDir),
   * made and given to the engine's account before the start (prepareEngineCache).
   */
  engineCacheDir: string;
  /** models.hub.endpoint: where an online engine downloads from, as the store's pulls do. */
  hubEndpoint?: string;
}

/**
 * The environment that points an engine at the node's store, so a second
 * start of a model reads its weights from local disk and reuses its compiled
 * graphs instead of rebuilding them (issue 30: torch.compile's cache thrown
 * away cost 166 s a start). Each name, and who reads it:
 *
 * - HF_HUB_CACHE: huggingface_hub's hub cache (constants.py HF_HUB_CACHE),
 *   which vLLM and SGLang load weights through; only with HF_HUB_OFFLINE,
 *   since the store is root's and read-only to engines (store-trust.ts): an
 *   engine that must download keeps its own cache under its HOME, as it
 *   would without a store. Not HF_HOME, which would
 *   move the engine's token file too (constants.py: HF_TOKEN_PATH defaults
 *   to $HF_HOME/token): an engine that must go online would no longer find
 *   the token `huggingface-cli login` saved for its user, and a gated repo
 *   would answer 401 (engine-fidelity review 2, N6).
 * - HF_HUB_OFFLINE=1, only when everything the engine reads at start is
 *   here (judgeOfflineStart): huggingface_hub then makes no request at all
 *   and resolves the revision from refs/ (constants.py HF_HUB_OFFLINE;
 *   file_download.py try_to_load_from_cache). Set when a file is missing it
 *   fails the start instead of fetching.
 * The compile caches below are per trust domain (security review 3, S9):
 * one folder per engine account, engine and model, the only one the engine
 * may write, so no engine loads code another account, engine or model's
 * engine could have written.
 *
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
  const own = input.engineCacheDir;
  return {
    VLLM_CACHE_ROOT: join(own, 'vllm'),
    SGLANG_CACHE_DIR: join(own, 'sglang'),
    TORCHINDUCTOR_CACHE_DIR: join(own, 'torchinductor'),
    TRITON_CACHE_DIR: join(own, 'triton'),
    // Online, the engine downloads what it lacks into a hub cache of its own (the store is read-only to it), from the operator's hub.
    ...(input.modelComplete ? { HF_HUB_CACHE: layout.hubDir, HF_HUB_OFFLINE: '1' } : { HF_HUB_CACHE: join(own, 'hub'), ...(input.hubEndpoint ? { HF_ENDPOINT: input.hubEndpoint } : {}) }),
  };
}

/** huggingface_hub's reading of HF_HUB_OFFLINE (constants.py _is_true): 1, ON, YES or TRUE in any case. */
export function isHubOffline(env: Readonly<Record<string, string | undefined>>): boolean {
  return ['1', 'ON', 'YES', 'TRUE'].includes((env.HF_HUB_OFFLINE ?? '').toUpperCase());
}

/**
 * Makes the engine's compile cache for a start (StoreLayout.engineCacheDir)
 * and gives it to the engine's account: every folder above it is the
 * agent's (0755), the leaf the account's (0700). An existing leaf must be a
 * real folder of that account or the agent's; anything else refuses the start.
 */
export async function prepareEngineCache(dir: string, account: { uid: number; gid: number } | undefined): Promise<void> {
  await mkdir(dirname(dir), { recursive: true, mode: 0o755 });
  await mkdir(dir, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  const st = await lstat(dir);
  const agentUid = process.geteuid?.() ?? 0;
  if (!st.isDirectory()) throw failure(`the compile cache ${dir} is not a folder; remove it (sudo rm ${dir}) and start again`);
  if (account && agentUid === 0 && account.uid !== agentUid && st.uid !== account.uid) {
    if (st.uid !== agentUid) throw failure(`the compile cache ${dir} is owned by uid ${st.uid}, not the engine's ${account.uid}; remove it and start again`);
    await lchown(dir, account.uid, account.gid);
  }
}
