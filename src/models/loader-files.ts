/*
 * The files of a model repo an engine's loader reads at start (issue 51,
 * review engine-fidelity-3 E11/E12): what "complete" means for a start,
 * what page-cache residency is counted over, and what `models warm` reads
 * first. The rules are the loaders' own, read at vLLM fork neuralmagic/vllm
 * 017e9f4448b700e85ee16023287b025693c72b9e (2026-08-17, between upstream
 * v0.27.1 and 2f41c894; `V:`) and SGLang fork bytedance-iaas/sglang
 * 6ed5780c4fd3075edd8a76fe6f09af51e4e900a6 (2026-08-22, `S:`):
 *
 * - Weights are found by glob in the snapshot's top folder only
 *   (`glob.glob(os.path.join(hf_folder, pattern))`), the first pattern of
 *   the load format that matches anything wins: auto tries `*.safetensors`,
 *   then `*.bin`, then `*.pt` (V:vllm/model_executor/model_loader/default_loader.py:165-215;
 *   S:python/sglang/srt/model_loader/loader.py:466-518). So `.bin`/`.pt`
 *   twins beside safetensors are never read.
 * - With safetensors, only the files named in `model.safetensors.index.json`'s
 *   weight_map are read when the index is there (filter_duplicate_safetensors_files,
 *   V:vllm/model_executor/model_loader/weight_utils.py:573-599; default_loader.py:217-232;
 *   S:…/loader.py:520-533); without one, every top-level safetensors file.
 * - Otherwise the trainer's leftovers are dropped (training_args.bin,
 *   optimizer.*, scheduler.pt, scaler.pt: weight_utils.py:602-617).
 * - `original/**` is ignored by default (LoadConfig.ignore_patterns,
 *   V:vllm/config/load.py:99; S:python/sglang/srt/configs/load_config.py:120-126),
 *   and online the index picks the download (weight_utils.py:461-480).
 * - vLLM's auto format is "mistral" when the repo has top-level
 *   `consolidated*.safetensors`: then only those are read, filtered by
 *   `consolidated.safetensors.index.json` (default_loader.py:150-178).
 *   SGLang's auto never is (loader.py:466-467).
 *
 * Files that are not weights (config, tokenizer, chat template, generation
 * config) are opened by name; every one the revision lists outside
 * `original/` counts as read, except the model card, licences and pictures
 * (NEVER_READ_AT_START), so a judgement errs towards "partial", which costs
 * a start from the hub, never a start that fails offline.
 *
 * The tokenizer (issue 51, one rule for the store and the double): vLLM
 * loads it with transformers' AutoTokenizer.from_pretrained on the local
 * snapshot offline (V:vllm/tokenizers/hf.py:198-216; the model id replaced
 * by its snapshot folder, V:vllm/engine/arg_utils.py:807-831,
 * V:vllm/transformers_utils/repo_utils.py:266-285). tokenizer_config.json is
 * optional there: get_tokenizer_config asks cached_file with
 * _raise_exceptions_for_missing_entries=False and returns {} when it is
 * absent, and AutoTokenizer then picks the class from config.json's
 * model_type (transformers 001f85b38fb432858ace93f18622f07cec46d874,
 * src/transformers/models/auto/tokenization_auto.py get_tokenizer_config
 * and AutoTokenizer.from_pretrained: "Could not locate the tokenizer
 * configuration file, will try to use the model config instead"); vLLM's
 * own reads of it return None when absent (V:…/repo_utils.py:372-398). So
 * a repo that ships none is complete without it; one that lists it needs
 * it (it holds the special tokens and chat template). What a tokenizer
 * cannot load without is a vocabulary (TOKENIZER_VOCABULARIES).
 */

/**
 * The vocabularies a tokenizer class loads from, any one of which makes a
 * folder loadable: the fast tokenizer's file, SentencePiece models, a BPE
 * vocabulary with its merges, a WordPiece list *(inferred from the
 * classes' vocab_files_names; tokenization_auto.py picks the class)*.
 */
export const TOKENIZER_VOCABULARIES: readonly (readonly string[])[] = [['tokenizer.json'], ['tokenizer.model'], ['spiece.model'], ['vocab.json', 'merges.txt'], ['vocab.txt']];

/** Whether a folder holding `has` could give AutoTokenizer a vocabulary (tokenizer_config.json optional: see above). */
export function holdsTokenizer(has: (name: string) => boolean): boolean {
  return TOKENIZER_VOCABULARIES.some((set) => set.every(has));
}

/** Files of a repo no engine opens at start: the model card, licences, git attributes, pictures. */
export const NEVER_READ_AT_START = /(^|\/)(README|LICEN[CS]E|NOTICE|USE_POLICY)[^/]*$|\.(md|png|jpe?g|gif|svg|webp)$|(^|\/)\.gitattributes$/i;

/** A checkpoint format: none of these is read unless the loader's rules pick it. */
const WEIGHT_FILE = /\.(safetensors|bin|pt|pth|ckpt|gguf|onnx|onnx_data|h5|msgpack|tflite|ot|npz)$/i;

/** The default ignore_patterns of both loaders. */
const IGNORED = /^original\//;

/** trainer leftovers filter_files_not_needed_for_inference drops (weight_utils.py:608-614). */
const NOT_FOR_INFERENCE = ['training_args.bin', 'optimizer.bin', 'optimizer.pt', 'scheduler.pt', 'scaler.pt'];

export const SAFE_WEIGHTS_INDEX = 'model.safetensors.index.json';
export const MISTRAL_INDEX = 'consolidated.safetensors.index.json';

/** Which loader, with which --load-format (auto when none). */
export interface LoaderRule {
  engine: string;
  loadFormat?: string;
}

/** The weight_map's file names of an index the store holds; undefined when it does not hold it or it cannot be read. */
export type IndexReader = (indexPath: string) => readonly string[] | undefined;

/** Load formats whose file choice is known here; any other reads what the judgement cannot tell, so every file counts. */
const KNOWN_FORMATS = new Set(['auto', 'hf', 'safetensors', 'fastsafetensors', 'mistral', 'pt', 'npcache']);

const topLevel = (p: string) => !p.includes('/');
/** Each glob's expression, made once: the patterns are the few above, and one made per file and pattern was a millisecond of a warm's plan. */
const globs = new Map<string, RegExp>();
const globMatch = (pattern: string, p: string) => {
  let re = globs.get(pattern);
  if (re === undefined) {
    re = new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replaceAll('*', '[^/]*')}$`);
    globs.set(pattern, re);
  }
  return re.test(p);
};

/**
 * The paths of `repoFiles` (one revision's listing, `/`-separated) the
 * engine's loader reads at start under `rule`, in the listing's order.
 */
export function filesLoaderReads(repoFiles: readonly string[], readIndex: IndexReader, rule: LoaderRule): string[] {
  const format = rule.loadFormat ?? 'auto';
  if (!KNOWN_FORMATS.has(format)) return repoFiles.filter((p) => !NEVER_READ_AT_START.test(p));
  const weights = weightFiles(repoFiles, readIndex, rule.engine, format);
  const listed = new Set(repoFiles);
  const chosen = new Set(weights);
  // A file the index names that the repo lacks is still read (and fails the start: weight_utils.py:589-595).
  return [...repoFiles.filter((p) => chosen.has(p) || (!IGNORED.test(p) && !WEIGHT_FILE.test(p) && !NEVER_READ_AT_START.test(p))), ...weights.filter((p) => !listed.has(p))];
}

/** The union of what vLLM's and SGLang's default loaders read: what Inventory's `complete` and residency are judged by. */
export function filesAnyLoaderReads(repoFiles: readonly string[], readIndex: IndexReader): string[] {
  const read = new Set([...filesLoaderReads(repoFiles, readIndex, { engine: 'vllm' }), ...filesLoaderReads(repoFiles, readIndex, { engine: 'sglang' })]);
  const listed = repoFiles.filter((p) => read.has(p));
  return [...listed, ...[...read].filter((p) => !listed.includes(p))];
}

function weightFiles(repoFiles: readonly string[], readIndex: IndexReader, engine: string, format: string): string[] {
  const top = repoFiles.filter(topLevel);
  let patterns: string[];
  let index = SAFE_WEIGHTS_INDEX;
  let mistral = format === 'mistral';
  // V: default_loader.py:150-163: auto is mistral when consolidated safetensors are there (vLLM only).
  if (format === 'auto' && engine !== 'sglang' && top.some((p) => globMatch('consolidated*.safetensors', p))) mistral = true;
  if (mistral) {
    patterns = ['consolidated*.safetensors'];
    index = MISTRAL_INDEX;
  } else if (format === 'safetensors' || format === 'fastsafetensors') patterns = ['*.safetensors'];
  else if (format === 'pt') patterns = ['*.pt'];
  else if (format === 'npcache') patterns = ['*.bin', '*.pt'];
  else patterns = ['*.safetensors', '*.bin', '*.pt'];
  for (const pattern of patterns) {
    const found = top.filter((p) => globMatch(pattern, p));
    if (found.length === 0) continue;
    if (pattern.endsWith('.safetensors')) {
      if (!top.includes(index)) return found;
      const named = readIndex(index);
      // An index the store does not hold is itself a missing file; the weights it would name are all counted.
      if (named === undefined) return found;
      const inIndex = new Set(named);
      return found.filter((p) => inIndex.has(p)).concat([...inIndex].filter((p) => !found.includes(p)));
    }
    return found.filter((p) => !NOT_FOR_INFERENCE.some((x) => p.endsWith(x)));
  }
  return [];
}

/** The value of --load-format (or --load_format) in an engine's args; undefined when absent. */
export function loadFormatOf(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === '--load-format' || a === '--load_format') return args[i + 1];
    const m = /^--load[-_]format=(.*)$/.exec(a);
    if (m) return m[1];
  }
  return undefined;
}

/** The weight_map file names of an index's text; undefined when it is not one. */
export function weightMapFiles(text: string): string[] | undefined {
  try {
    const map = (JSON.parse(text) as { weight_map?: unknown }).weight_map;
    if (typeof map !== 'object' || map === null) return undefined;
    return [...new Set(Object.values(map).filter((v): v is string => typeof v === 'string'))];
  } catch {
    return undefined;
  }
}
