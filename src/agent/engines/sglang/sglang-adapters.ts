/**
 * SGLang's LoRA adapters: its runtime adapter API as data, and the flags a
 * start with adapters needs. Citations are to SGLang 6ed5780c (the
 * bytedance-iaas fork's head, S:path:line), as read for issue 53.
 */
import type { AdapterLimits, EngineAdapterApi } from '../../../lib/engine-adapter-api.js';
import type { AdapterConfigFeatures } from '../../../models/adapters/adapter-files.js';
import type { EngineAdapters } from '../engine-kind.js';
import { findFlags } from '../find-flags.js';

/** --max-loras-per-batch's default (S:python/sglang/srt/server_args.py:2799-2803). */
export const SGLANG_DEFAULT_LORAS_PER_BATCH = 8;

export const SGLANG_ADAPTER_API: EngineAdapterApi = {
  // LoadLoRAAdapterReqInput {lora_name, lora_path, pinned} (S:python/sglang/srt/managers/io_struct.py:2113-2119);
  // ADMIN_OPTIONAL routes (S:python/sglang/srt/entrypoints/http_server.py:1519-1527, 1542-1550).
  load: { path: '/load_lora_adapter', nameField: 'lora_name', pathField: 'lora_path', pinnedField: 'pinned' },
  unload: { path: '/unload_lora_adapter', nameField: 'lora_name' },
  // Adapters are cards with id=lora_name, root=lora_path, parent=the served name (http_server.py:1839-1850).
  list: { path: '/v1/models' },
  // No inFlightMetric: its metrics say only how many pool slots the running batch's adapters take
  // (sglang:lora_pool_slots_used, S:python/sglang/srt/observability/metrics_collector.py:606-626), never which.
  // The unload removes the adapter from the memory pool (S:python/sglang/srt/lora/lora_manager.py:346-352),
  // after the requests using it have ended (tokenizer_control_mixin.py:573-583; lora_registry.py:186-203).
  unloadFreesSlot: true,
  // Beyond --max-loaded-loras a load unloads the least recently used unpinned adapter (lookups count as use:
  // lora_registry.py:86-90, 132-143, 221-234; tokenizer_control_mixin.py:628-656).
  evictsLeastRecentlyUsed: true,
  // pinned: never evicted (lora_registry.py:230-232); at most --max-loras-per-batch - 1 of them (lora_manager.py:307-313).
  supportsPinned: true,
  // `model: "<base>:<adapter>"` names the adapter; a bare name is taken as the (unchecked) model, the base answers
  // (S:python/sglang/srt/entrypoints/openai/serving_base.py:40-71; serving_completions.py:58-64, 108-119).
  requestModel: 'base:name',
  // A request naming an adapter unloaded or evicted loads it again (S:python/sglang/srt/managers/tokenizer_manager.py:3307-3336).
  reloadsOnRequest: true,
  // LoRAUpdateOutput {success, error_message, loaded_adapters} with 200 or 400 (http_server.py:1526-1527; io_struct.py:2169-2177).
  replies: 'json-success',
};

const FLAGS = { flags: ['--max-loaded-loras', '--max-lora-rank'] } as const;

/** --max-loaded-loras and --max-lora-rank as a profile's args set them (the last one given wins, as argparse). */
export function sglangLimitsFromArgs(args: readonly string[]): Partial<AdapterLimits> {
  const out: Partial<AdapterLimits> = {};
  for (const hit of findFlags(args, FLAGS)) {
    const n = Number(hit.value);
    if (!Number.isInteger(n) || n < 1) continue;
    if (hit.flag === '--max-loaded-loras') out.maxLoaded = n;
    else out.maxRank = n;
  }
  return out;
}

/**
 * What LoRAManager.validate_new_adapter refuses, in its words: DoRA
 * (S:python/sglang/srt/lora/lora_manager.py:279-283). modules_to_save and
 * bias are not checked there, so they are left to the engine.
 */
export function sglangRefusesConfig(f: AdapterConfigFeatures): string | undefined {
  return f.useDora ? "LoRA serving currently doesn't support DoRA adapters (use_dora)" : undefined;
}

export const SGLANG_ADAPTERS: EngineAdapters = {
  api: SGLANG_ADAPTER_API,
  refusesConfig: sglangRefusesConfig,
  launch: (limits) => ({
    args: [
      // S:python/sglang/srt/server_args.py:2761-2803 (the LoRA group).
      '--enable-lora',
      '--max-lora-rank',
      String(limits.maxRank),
      // Without --lora-paths both --max-lora-rank and --lora-target-modules are required (server_args.py:9018-9021);
      // 'all' alone targets every supported module (:9013-9016).
      '--lora-target-modules',
      'all',
      '--max-loaded-loras',
      String(limits.maxLoaded),
      // max_loaded_loras must be >= max_loras_per_batch (server_args.py:9024-9028), whose default is 8.
      '--max-loras-per-batch',
      String(Math.min(limits.maxLoaded, SGLANG_DEFAULT_LORAS_PER_BATCH)),
    ],
    env: {},
  }),
  limitsFromArgs: sglangLimitsFromArgs,
};
