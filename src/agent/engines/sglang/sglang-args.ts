import type { CodeLoadingArgs } from '../code-loading-args.js';

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
