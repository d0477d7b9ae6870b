import { usageError } from '../../lib/errors.js';

/*
 * What a PEFT LoRA adapter is to the store (issue 53, item 1): the files the
 * engines' LoRA loaders read from the folder they are given as lora_path,
 * read at vLLM fork neuralmagic/vllm 017e9f4448b700e85ee16023287b025693c72b9e
 * (`V:`) and SGLang fork bytedance-iaas/sglang
 * 6ed5780c4fd3075edd8a76fe6f09af51e4e900a6 (`S:`), the commits
 * loader-files.ts cites for the models' rule:
 *
 * - `adapter_config.json`, always, by name (V:vllm/lora/peft_helper.py:89,
 *   from_local_dir; S:python/sglang/srt/lora/lora_config.py:83). Its `r`,
 *   `lora_alpha` and `target_modules` are required by both (V:peft_helper.py:28-30
 *   and 74-76, "Missing required configuration fields"; S:lora_config.py:42-44,
 *   a KeyError), and vLLM refuses r <= 0 (V:peft_helper.py:54).
 * - vLLM's weights: `adapter_model.safetensors`, else `adapter_model.bin`,
 *   else `adapter_model.pt`, by name; none of them is "doesn't contain
 *   tensors" (V:vllm/lora/lora_model.py:205-207, 261, 278-283, 296).
 * - SGLang's weights: the default loader's glob in the folder's top level,
 *   `*.safetensors`, else `*.bin`, else `*.pt` (fall_back_to_pt=True,
 *   S:python/sglang/srt/lora/lora.py:151; S:python/sglang/srt/model_loader/loader.py:467,
 *   490, 512), the trainer's leftovers dropped from .bin (loader.py:535).
 * - `added_tokens.json` when the adapter has one (S:lora_config.py:95-104).
 *
 * So a repo is an adapter when its top level has adapter_config.json, and it
 * is complete when it also has one of vLLM's weight names: the union of what
 * either engine reads is what the store must hold, what the content digest
 * is taken over, and what a start is given (the snapshot folder, whole).
 */

export const ADAPTER_CONFIG = 'adapter_config.json';

/** vLLM's names, in the order its loader tries them (lora_model.py:205-207). */
export const ADAPTER_WEIGHTS = ['adapter_model.safetensors', 'adapter_model.bin', 'adapter_model.pt'] as const;

const ADDED_TOKENS = 'added_tokens.json';

/** filter_files_not_needed_for_inference's names (S:loader.py:535, the same list as loader-files.ts). */
const NOT_FOR_INFERENCE = ['training_args.bin', 'optimizer.bin', 'optimizer.pt', 'scheduler.pt', 'scaler.pt'];

/** A real adapter_config.json is a few KiB; a larger one is not read. */
export const MAX_ADAPTER_CONFIG_BYTES = 1024 * 1024;

/** base_model_name_or_path is a hub id or the trainer's local path; longer is no base any engine was started with. */
const MAX_BASE_CHARS = 512;

const topLevel = (p: string) => !p.includes('/');

/** Whether a revision's listing is a PEFT adapter's: adapter_config.json in its top level. */
export function isAdapterListing(paths: readonly string[]): boolean {
  return paths.includes(ADAPTER_CONFIG);
}

export interface AdapterFiles {
  /** What vLLM's or SGLang's loader reads of the listing, in the listing's order. */
  reads: string[];
  /** What they need that the listing lacks: vLLM's weight file when it has none of its names. */
  missing: string[];
}

/** The files of an adapter's listing (`/`-separated paths of one revision) the LoRA loaders read. */
export function adapterFilesRead(paths: readonly string[]): AdapterFiles {
  const top = paths.filter(topLevel);
  const read = new Set<string>([ADAPTER_CONFIG]);
  const vllm = ADAPTER_WEIGHTS.find((w) => top.includes(w));
  if (vllm) read.add(vllm);
  for (const ext of ['.safetensors', '.bin', '.pt']) {
    const found = top.filter((p) => p.endsWith(ext) && !(ext !== '.safetensors' && NOT_FOR_INFERENCE.includes(p)));
    if (found.length === 0) continue;
    for (const p of found) read.add(p);
    break;
  }
  if (top.includes(ADDED_TOKENS)) read.add(ADDED_TOKENS);
  const missing = [...(top.includes(ADAPTER_CONFIG) ? [] : [ADAPTER_CONFIG]), ...(vllm ? [] : [ADAPTER_WEIGHTS[0]])];
  return { reads: paths.filter((p) => read.has(p)), missing };
}

/** The one-line refusal of an adapter whose listing lacks a file the loaders read. */
export function incompleteAdapterError(repo: string, revision: string, missing: readonly string[], where: string) {
  const weights = missing.includes(ADAPTER_WEIGHTS[0]) ? ` (nor ${ADAPTER_WEIGHTS.slice(1).join(' nor ')}, which vLLM reads instead)` : '';
  return usageError(`${repo}@${revision} is an incomplete LoRA adapter: ${where} has no ${missing.join(', ')}${weights}, which vLLM and SGLang load; push the adapter with it (PEFT's save_pretrained writes both)`);
}

/** What the store records of an adapter from its adapter_config.json. */
export interface AdapterMeta {
  /** base_model_name_or_path: the model it was trained on. */
  baseModel: string;
  /** r, the rank an engine's --max-lora-rank must allow. */
  rank: number;
  /** What some engines refuse to load (AdapterConfigFeatures); absent from a manifest's record, read from the config at each resolve. */
  features?: AdapterConfigFeatures;
}

/** adapter_config.json's fields an engine may refuse: use_dora, modules_to_save, bias (PEFT's names). */
export interface AdapterConfigFeatures {
  useDora: boolean;
  /** modules_to_save is set (a list, not null). */
  modulesToSave: boolean;
  /** bias: "none" (PEFT's default), "all" or "lora_only". */
  bias: string;
}

/** adapter_config.json's text read as the loaders read it; a one-line usageError naming what is wrong. */
export function parseAdapterConfig(text: string, what: string): AdapterMeta {
  const bad = (problem: string) => usageError(`${what}'s ${ADAPTER_CONFIG} ${problem}; vLLM and SGLang would refuse to load it`);
  let cfg: unknown;
  try {
    cfg = JSON.parse(text);
  } catch {
    throw bad('is not JSON');
  }
  if (typeof cfg !== 'object' || cfg === null || Array.isArray(cfg)) throw bad('is not a JSON object');
  const c = cfg as Record<string, unknown>;
  const absent = ['r', 'lora_alpha', 'target_modules'].filter((k) => c[k] === undefined || c[k] === null);
  if (absent.length > 0) throw bad(`has no ${absent.join(', ')}`);
  if (typeof c.r !== 'number' || !Number.isSafeInteger(c.r) || c.r <= 0) throw bad(`has r ${JSON.stringify(c.r).slice(0, 40)}, not a positive integer`);
  const base = c.base_model_name_or_path;
  if (typeof base !== 'string' || base === '') {
    throw usageError(`${what}'s ${ADAPTER_CONFIG} has no base_model_name_or_path; the store binds every adapter to the model it was trained on, so set it to that model's hub id`);
  }
  // Printable and bounded: it reaches `models list`, the control plane and logs (security review 3, S2).
  if (base.length > MAX_BASE_CHARS || /\p{Cc}/u.test(base)) throw bad(`has a base_model_name_or_path that is no model name (control characters or over ${MAX_BASE_CHARS} characters)`);
  const mts = c.modules_to_save;
  const features: AdapterConfigFeatures = {
    useDora: c.use_dora === true,
    modulesToSave: Array.isArray(mts) ? mts.length > 0 : mts !== undefined && mts !== null,
    bias: typeof c.bias === 'string' ? c.bias.slice(0, 20) : 'none',
  };
  return { baseModel: base, rank: c.r, features };
}

/** A manifest's adapter record as written by anyone: kept only when it is one parseAdapterConfig could have made. */
export function checkedAdapterMeta(v: unknown): AdapterMeta | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const { baseModel, rank } = v as { baseModel?: unknown; rank?: unknown };
  if (typeof baseModel !== 'string' || baseModel === '' || baseModel.length > MAX_BASE_CHARS || /\p{Cc}/u.test(baseModel)) return undefined;
  if (typeof rank !== 'number' || !Number.isSafeInteger(rank) || rank <= 0) return undefined;
  return { baseModel, rank };
}
