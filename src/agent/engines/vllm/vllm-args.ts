import type { CodeLoadingArgs } from '../code-loading-args.js';

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
