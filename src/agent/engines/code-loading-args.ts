import type { HubRepoRef } from '../../models/judge-offline-start.js';
import { type FlagHit, findFlags } from './find-flags.js';

/**
 * The options of an engine that load code, open or write files, or reach an
 * endpoint, which a control plane's profile args may set only where the
 * operator lists them in `engines.<name>.allowed_args`; and the options
 * whose value names a model (a hub repo id passes, a local path only under
 * `engines.<name>.model_roots`). The control plane chooses what runs as the
 * engine's user on every node: `--trust-remote-code` with a repo it chose ran
 * that repo's Python, `--tool-parser-plugin FILE` imported a file,
 * `--allowed-local-media-path /` served every file to API clients,
 * `--chat-template /etc/shadow` read one (security review 2, N1).
 *
 * Each option is listed with its aliases, the name an operator lists first.
 * `extra_args` is the operator's own and is not judged.
 */
export interface CodeLoadingArgs {
  /** Refused unless allowed_args names one of its spellings. */
  refused: readonly (readonly string[])[];
  /** Their value is a model, tokenizer or config: a hub repo id, or a path under a model root, unless allowed_args names them. */
  modelPaths: readonly (readonly string[])[];
  /**
   * For a modelPaths option (by its first name) whose hub repo the engine
   * reads at start: the option that sets the revision it is read at, main
   * when that option is absent; '' when the engine passes no revision (main
   * always). A start is offline only when each such repo is in the store at
   * that revision (judgeOfflineStart).
   */
  hubRevisions?: Readonly<Record<string, string>>;
  /**
   * Options (all spellings) whose JSON value may name a hub repo the engine
   * reads at start, with the keys of the repo and of its revision: vLLM's
   * draft model inside --speculative-config. Only an operator's allowed_args
   * lets them through; then they count for an offline start too.
   */
  hubRepoInJson?: readonly { flags: readonly string[]; repoKey: string; revisionKey: string }[];
  /** The engine's own options that are a prefix of a listed one (see FlagSet.mayPass). */
  mayPass: readonly string[];
  /** vLLM's FlexibleArgumentParser spellings (see FlagSet.flexible). */
  flexible?: boolean;
}

/** What a profile's args ask that the operator has not allowed. */
export interface CodeLoadingHit extends FlagHit {
  /** refused: listed in `refused`; model-path: its value must be checked as a model reference. */
  kind: 'refused' | 'model-path';
}

/*
 * vLLM, read at upstream main 2f41c894e320a07a46a360ee72149dd84d6f4bec
 * (2026-08-20; the tree of test/fixtures/engines/vllm-serve-flags.txt).
 * AU = vllm/engine/arg_utils.py, CLI = vllm/entrypoints/openai/cli_args.py,
 * config fields in vllm/config/<file>.py.
 */
export const VLLM_CODE_LOADING_ARGS: CodeLoadingArgs = {
  refused: [
    // Code: the model repo's own Python (AU:850, model.py:166).
    ['--trust-remote-code'],
    // Code: classes and callables by import path. Worker classes (AU:1196-1197,
    // parallel.py:259-265, resolved at v1/worker/worker_base.py:255,266); an
    // executor class (AU:1016, any other string is resolved at
    // v1/executor/abstract.py:83); a scheduler class (AU:1557, scheduler.py:191);
    // ASGI middleware (CLI:309); logits processors (AU:926, model.py:362);
    // model classes "module:class" (AU:909, model.py:319).
    ['--worker-cls'],
    ['--worker-extension-cls'],
    ['--distributed-executor-backend'],
    ['--scheduler-cls'],
    ['--middleware'],
    ['--logits-processors'],
    ['--model-class-overrides'],
    // Code: a Python file imported by path (CLI:116; AU:1005,
    // structured_outputs.py:38), also inside --structured-outputs-config (AU:1660).
    ['--tool-parser-plugin'],
    ['--reasoning-parser-plugin'],
    ['--structured-outputs-config'],
    // Code: a dotted model is a custom proposer class (speculative.py:730-754),
    // and the config holds a draft LoadConfig with its download_dir (:215)
    // (AU:1626, -sc; AU:1631).
    ['--speculative-config', '-sc'],
    ['--spec-model'],
    // Code and files: a compile backend by import path (compilation.py:1097),
    // debug_dump_path and cache_dir written (:461-463) (AU:1649).
    ['--compilation-config', '-cc'],
    // Code: connector and cache-manager modules by path (kv_transfer.py:62,
    // ec_transfer.py:56, ec_manager_config.py:30) (AU:1639, 1643, 1646).
    ['--kv-transfer-config'],
    ['--ec-transfer-config'],
    ['--ec-manager-config'],
    // Code: a logging dictConfig file, whose "()" keys call any callable (CLI:127).
    ['--log-config-file'],
    // Code and endpoints: "demo" runs model-written Python, else host:port
    // tool servers the engine calls (CLI:120).
    ['--tool-server'],
    // Any option at all: a YAML file of them, read before parsing
    // (CLI:394; vllm/utils/argparse_utils.py:298, 443-525).
    ['--config'],
    // Files read: a template path (CLI:80); TLS keys and certificates (CLI:294-298);
    // LoRA adapters by path (CLI:75; AU:1442, lora.py:53); the loader's extra
    // config, a tensorizer URI among them (AU:956, load.py:93); fp8 scales (AU:1349).
    ['--chat-template'],
    ['--ssl-keyfile'],
    ['--ssl-certfile'],
    ['--ssl-ca-certs'],
    ['--lora-modules'],
    ['--default-mm-loras'],
    ['--model-loader-extra-config'],
    ['--mm-encoder-fp8-scale-path'],
    // Files written: weights downloaded there (AU:944, load.py:59); profiler
    // traces (AU:1663, profiler.py:49-54); fp8 scales (AU:1353).
    ['--download-dir'],
    ['--profiler-config'],
    ['--mm-encoder-fp8-scale-save-path'],
    // Files for every API client: file:// media under this directory (AU:856, model.py:196).
    ['--allowed-local-media-path'],
    // Endpoints: traces sent out (AU:1465, observability.py:36); a ZMQ
    // publisher bound, tcp://*:5557 by default (AU:1642, kv_events.py:23).
    ['--otlp-traces-endpoint'],
    ['--kv-events-config'],
  ],
  // A name or a path (AU:848 tokenizer, AU:855 hf_config_path, AU:913
  // generation_config: "auto", "vllm" or a folder; model.py:142, 193, 326).
  modelPaths: [['--tokenizer'], ['--hf-config-path'], ['--generation-config']],
  // Offline, the tokenizer is resolved at --tokenizer-revision (None: main)
  // with local_files_only (AU:823-825; transformers_utils/repo_utils.py:279-297);
  // the config path at the model's --revision (model.py:620-623); a
  // generation config folder at none, so main (model.py:1702-1705).
  hubRevisions: { '--tokenizer': '--tokenizer-revision', '--hf-config-path': '--revision', '--generation-config': '' },
  // The draft model is a ModelConfig of its own, at the config's "revision"
  // (None: main) (vllm/config/speculative.py:94, 132, 903-917).
  hubRepoInJson: [{ flags: ['--speculative-config', '-sc'], repoKey: 'model', revisionKey: 'revision' }],
  // vLLM options that begin a listed one (test/fixtures/engines/vllm-serve-flags.txt).
  mayPass: ['--model', '--reasoning-parser'],
  flexible: true,
};

/*
 * SGLang, read at tag v0.5.18, 71de97b264b04dcd514cf904003028aefe9775c8
 * (2026-08-20; the tree of test/fixtures/engines/sglang-server-flags.txt).
 * SA = python/sglang/srt/server_args.py (ServerArgs fields; the flag is the
 * field's name with dashes).
 */
export const SGLANG_CODE_LOADING_ARGS: CodeLoadingArgs = {
  refused: [
    // Code: the model repo's own Python (SA:576).
    ['--trust-remote-code'],
    // Code: API clients send serialized logit processors the engine runs (SA:3493).
    ['--enable-custom-logit-processor'],
    // Code: callables and modules by import path: a weight loader (SA:3236);
    // forward hooks' hook_factory (SA:3571, model_executor/hook_manager.py:25-33);
    // a sidecar module's main(argv) (SA:1301); a dynamic storage backend's
    // module_path, or an '@file' read (SA:2711-2738, mem_cache/hiradix_cache.py:701).
    ['--custom-weight-loader'],
    ['--forward-hooks'],
    ['--sidecar'],
    ['--hicache-storage-backend-extra-config'],
    // Code and endpoints: "demo" or tool server URLs (SA:1425).
    ['--tool-server'],
    // Any option at all: a YAML file merged into argv (SA:8699, :9785-9791).
    ['--config'],
    // Files read: templates (SA:1379, 1389); TLS keys and certificates
    // (SA:1340-1346); LoRA adapters (SA:2903); KV scales (SA:667); ModelOpt
    // checkpoints (SA:720); tables, maps and corpora of speculative decoding
    // (SA:2125, 2134, 2170, 2256, 2319); expert locations, a .pt or .json
    // (SA:2405, eplb/expert_location.py:791-796); DeepEP config, JSON or a path
    // (SA:2438); LMCache, FlexKV, dLLM, PD-mux, decrypted and msProbe configs
    // (SA:3015, 3032, 3084, 3218, 3316, 3319, 3579); ktransformers weights
    // (SA:3045); a checksums file (SA:3303); a tensor dump input (SA:3471);
    // the loader's extra config, presharded_path among it (SA:567); the
    // weight-cache daemon's socket (SA:3552).
    ['--chat-template'],
    ['--completion-template'],
    ['--ssl-keyfile'],
    ['--ssl-certfile'],
    ['--ssl-ca-certs'],
    ['--lora-paths'],
    ['--quantization-param-path'],
    ['--modelopt-checkpoint-restore-path'],
    ['--speculative-dspark-sps-table-path'],
    ['--speculative-dspark-confidence-sts-path'],
    ['--speculative-token-map'],
    ['--speculative-adaptive-config'],
    ['--speculative-ngram-external-corpus-path'],
    ['--init-expert-location'],
    ['--deepep-config'],
    ['--lmcache-config-file'],
    ['--flexkv-config-file'],
    ['--dllm-algorithm-config'],
    ['--pdmux-config-path'],
    ['--decrypted-config-file'],
    ['--decrypted-draft-config-file'],
    ['--msprobe-dump-config'],
    ['--kt-weight-path'],
    ['--model-checksum'],
    ['--debug-tensor-dump-input-file'],
    ['--model-loader-extra-config'],
    ['--weight-cache-socket'],
    // Files written: downloads (SA:3300); file storage (SA:1394); ModelOpt
    // outputs (SA:729, 737); request logs (SA:1524); crash dumps (SA:1539);
    // metrics files (SA:1668); traces (SA:2291); tensor dumps (SA:3459).
    ['--download-dir'],
    ['--file-storage-path'],
    ['--modelopt-checkpoint-save-path'],
    ['--modelopt-export-path'],
    ['--log-requests-target'],
    ['--crash-dump-folder'],
    ['--export-metrics-to-file-dir'],
    ['--spec-trace-dir'],
    ['--debug-tensor-dump-output-folder'],
    // Endpoints: traces sent out (SA:1657); KV events published (SA:1635);
    // ZMQ endpoints bound and dialled (SA:2264, 2270).
    ['--otlp-traces-endpoint'],
    ['--kv-events-config'],
    ['--decoupled-spec-bind-endpoint'],
    ['--decoupled-spec-connect-endpoints'],
  ],
  // A name or a path (SA:500 tokenizer_path, SA:2079 speculative_draft_model_path).
  modelPaths: [['--tokenizer-path'], ['--speculative-draft-model-path', '--speculative-draft-model']],
  // The tokenizer at the model's --revision (managers/tokenizer_manager.py:517,
  // SA:4348-4352); the draft at --speculative-draft-model-revision, else main (SA:4354-4357).
  hubRevisions: { '--tokenizer-path': '--revision', '--speculative-draft-model-path': '--speculative-draft-model-revision' },
  // SGLang options that begin a listed one (test/fixtures/engines/sglang-server-flags.txt).
  mayPass: ['--dllm-algorithm', '--export-metrics-to-file', '--hicache-storage-backend', '--log-requests', '--model', '--quantization', '--speculative-adaptive'],
};

/** An engine that loads no model and no code of the control plane's choosing (the sim). */
export const NO_CODE_LOADING_ARGS: CodeLoadingArgs = { refused: [], modelPaths: [], mayPass: [] };

/**
 * The profile args that set an option of `list` which `allowedArgs` (the
 * operator's engines.<name>.allowed_args) does not name, in argv order. An
 * entry allows an option by any of its spellings: `--speculative-config`
 * allows `-sc` and `--speculative_config.model` too.
 */
export function codeLoadingArgsIn(args: readonly string[], list: CodeLoadingArgs, allowedArgs: readonly string[]): CodeLoadingHit[] {
  const spell = (f: string) => (list.flexible && f.startsWith('--') ? `--${f.slice(2).replaceAll('_', '-')}` : f);
  const allowed = new Set(allowedArgs.map(spell));
  const groups = [...list.refused.map((g) => ({ g, kind: 'refused' as const })), ...list.modelPaths.map((g) => ({ g, kind: 'model-path' as const }))];
  const groupOf = new Map(groups.flatMap(({ g, kind }) => g.map((f) => [f, { g, kind }] as const)));
  const flags = [...groupOf.keys()];
  const hits: CodeLoadingHit[] = [];
  for (const hit of findFlags(args, { flags, mayPass: list.mayPass, flexible: list.flexible })) {
    const group = groupOf.get(hit.flag);
    if (!group || group.g.some((f) => allowed.has(f))) continue;
    // The option's first name: what the operator lists, and what a message names.
    hits.push({ ...hit, flag: group.g[0] as string, kind: group.kind });
  }
  return hits;
}

/**
 * The repos other than the model that a profile's args make the engine read
 * at start (a tokenizer, a draft model), each with the revision it is read
 * at: what must be in the store too for an offline start. Every spelling of
 * an option counts, allowed or not (allowed_args lets a path through
 * validation; it does not put the repo in the store).
 */
export function hubReposIn(args: readonly string[], list: CodeLoadingArgs): HubRepoRef[] {
  const revisions = list.hubRevisions ?? {};
  const groups = list.modelPaths.filter((g) => (g[0] as string) in revisions);
  const firstName = new Map(groups.flatMap((g) => g.map((f) => [f, g[0] as string] as const)));
  const revisionFlags = [...new Set(Object.values(revisions).filter((f) => f !== ''))];
  const given = new Map<string, string>();
  // `--tokenizer x` begins `--tokenizer-revision`, but argparse takes the exact option first.
  const exact = [...list.mayPass, ...list.modelPaths.flat()];
  for (const hit of findFlags(args, { flags: revisionFlags, mayPass: exact, flexible: list.flexible })) {
    if (hit.value !== undefined) given.set(hit.flag, hit.value);
  }
  const refs: HubRepoRef[] = [];
  for (const hit of findFlags(args, { flags: [...firstName.keys()], mayPass: list.mayPass, flexible: list.flexible })) {
    const name = firstName.get(hit.flag);
    if (name === undefined || hit.value === undefined) continue;
    const revisionFlag = revisions[name] ?? '';
    refs.push({ namedBy: name, value: hit.value, revision: (revisionFlag !== '' ? given.get(revisionFlag) : undefined) ?? 'main' });
  }
  for (const j of list.hubRepoInJson ?? []) {
    for (const hit of findFlags(args, { flags: j.flags, mayPass: list.mayPass, flexible: list.flexible })) {
      const ref = repoInJson(hit.value, j.repoKey, j.revisionKey);
      if (ref) refs.push({ namedBy: j.flags[0] as string, ...ref });
    }
  }
  return refs;
}

/**
 * The repo a JSON option value names under `repoKey`, at `revisionKey`
 * (main when absent). A value that is not a JSON object is the dotted
 * spelling's (`--speculative-config.model x`): taken as the repo itself, at
 * main, which a judge that finds it no hub id then ignores.
 */
function repoInJson(value: string | undefined, repoKey: string, revisionKey: string): { value: string; revision: string } | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return { value, revision: 'main' };
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const o = parsed as Record<string, unknown>;
  const repo = o[repoKey];
  if (typeof repo !== 'string') return undefined;
  const revision = o[revisionKey];
  return { value: repo, revision: typeof revision === 'string' && revision !== '' ? revision : 'main' };
}
