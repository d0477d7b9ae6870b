/**
 * vLLM's LoRA adapters: its runtime adapter API as data, and the flags and
 * environment a start with adapters needs. Citations are to vLLM 017e9f44
 * (V:path:line), as read for issue 53.
 */
import type { AdapterLimits, EngineAdapterApi } from '../../../lib/engine-adapter-api.js';
import type { AdapterConfigFeatures } from '../../../models/adapters/adapter-files.js';
import type { EngineAdapters } from '../engine-kind.js';
import { findFlags } from '../find-flags.js';

export const VLLM_ADAPTER_API: EngineAdapterApi = {
  // LoadLoRAAdapterRequest {lora_name, lora_path, load_inplace, is_3d_lora_weight} (V:vllm/entrypoints/serve/lora/protocol.py:7-11),
  // routed only when VLLM_ALLOW_RUNTIME_LORA_UPDATING is set (V:vllm/entrypoints/serve/lora/api_router.py:26-29, 43-52).
  load: { path: '/v1/load_lora_adapter', nameField: 'lora_name', pathField: 'lora_path' },
  // UnloadLoRAAdapterRequest {lora_name, lora_int_id?} (protocol.py:14-16; api_router.py:59-72).
  unload: { path: '/v1/unload_lora_adapter', nameField: 'lora_name' },
  // Adapters are cards with id=lora_name, root=lora_path, parent=the base's name (V:vllm/entrypoints/openai/models/serving.py:149-165).
  list: { path: '/v1/models' },
  // A gauge whose labels name the adapters with running and waiting requests, comma-joined, and max_lora;
  // its value is the time it was set (V:vllm/v1/metrics/loggers.py:1061-1074, 1167-1179; stats.py:558-563).
  inFlightMetric: 'vllm:lora_requests_info',
  // The unload only deletes the frontend's name (V:vllm/entrypoints/openai/models/serving.py:221-235): nothing under
  // entrypoints calls remove_lora, the worker keeps the adapter in its LRU cache until a later load evicts it
  // (V:vllm/lora/worker_manager.py:288-324), and a reload under the same name gets a new lora_int_id
  // (serving.py:179-183), so the worker caches both copies (vLLM #54839).
  unloadFreesSlot: false,
  // Names never leave the frontend's registry by themselves: only the worker's cache is LRU (worker_manager.py:309-313).
  evictsLeastRecentlyUsed: false,
  // The HTTP load has no pin (protocol.py:7-11); pin_adapter is reachable only offline (worker_manager.py:191-192).
  supportsPinned: false,
  // A request's model is looked up among the adapter names (V:vllm/entrypoints/serve/engine/serving.py:178-197).
  requestModel: 'name',
  // An unloaded name is 404 (serving.py:40-65), unless a LoRA resolver plugin is installed (serving.py:50-54, models/serving.py:282-340).
  reloadsOnRequest: false,
  // 200 with "Success: LoRA adapter 'x' added successfully." as text; errors as ErrorResponse JSON (api_router.py:44-52).
  replies: 'text',
};

/** --max-lora-rank's choices (MaxLoRARanks, V:vllm/config/lora.py:27); any other value exits at argument parsing. */
export const VLLM_LORA_RANKS: readonly number[] = [1, 8, 16, 32, 64, 128, 256, 320, 512];

/** The smallest rank vLLM takes that is at least `rank` (undefined above 512). */
export function vllmLoraRank(rank: number): number | undefined {
  return VLLM_LORA_RANKS.find((r) => r >= rank);
}

const FLAGS = { flags: ['--max-loras', '--max-lora-rank'], flexible: true } as const;

/** --max-loras and --max-lora-rank as a profile's args set them (the last one given wins, as argparse). */
export function vllmLimitsFromArgs(args: readonly string[]): Partial<AdapterLimits> {
  const out: Partial<AdapterLimits> = {};
  for (const hit of findFlags(args, FLAGS)) {
    const n = Number(hit.value);
    if (!Number.isInteger(n) || n < 1) continue;
    if (hit.flag === '--max-loras') out.maxLoaded = n;
    else out.maxRank = n;
  }
  return out;
}

/**
 * What PEFTHelper refuses at a load, in its words (V:vllm/lora/peft_helper.py:42-51:
 * modules_to_save, use_dora; :129-130: bias other than "none"), raised as
 * the load's ValueError (validate_legal, :118-132).
 */
export function vllmRefusesConfig(f: AdapterConfigFeatures): string | undefined {
  if (f.useDora) return 'vLLM does not yet support DoRA (use_dora)';
  if (f.modulesToSave) return 'vLLM only supports modules_to_save being None';
  if (f.bias !== 'none') return `Adapter bias is not supported (bias ${JSON.stringify(f.bias)})`;
  return undefined;
}

export const VLLM_ADAPTERS: EngineAdapters = {
  api: VLLM_ADAPTER_API,
  refusesConfig: vllmRefusesConfig,
  launch: (limits) => ({
    args: [
      // V:vllm/engine/arg_utils.py:609-614: enable_lora, max_loras (GPU slots, adapters in one batch: V:vllm/config/lora.py:37-38;
      // the worker's cache, max_cpu_loras, defaults to it: lora.py:116-124), max_lora_rank (default 16, lora.py:35).
      '--enable-lora',
      '--max-loras',
      String(limits.maxLoaded),
      '--max-lora-rank',
      String(vllmLoraRank(limits.maxRank) ?? limits.maxRank),
    ],
    // Read as "1"/"true", any case (V:vllm/envs.py:1180-1183); without it the routes are not mounted (api_router.py:26-29).
    env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
  }),
  limitsFromArgs: vllmLimitsFromArgs,
};
