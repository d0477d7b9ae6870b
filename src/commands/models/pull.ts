import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';

export default class ModelsPull extends BaseCommand {
  static override summary = 'Download a model from the Hugging Face Hub into the node-local store (models.cache_dir).';

  static override description = `Resolves --revision with the hub (models.hub.endpoint, token from
models.hub.token_file), then fetches the files that are not in the store yet:
a file a killed pull left partial is resumed with a Range request; every file
is verified against the hub's sha256 (LFS) or git blob id before it is
renamed into place, and one that does not match is deleted and fetched once
more. One pull per model at a time, across processes: a second one waits and
then fetches nothing. When the pull would exceed models.budget, the least
recently used models no shard pins are evicted first. The store is a Hugging
Face hub cache, so an engine given it (HF_HUB_CACHE) starts from local disk.
Progress goes to stderr; stdout gets a summary and the snapshot path.

A repo with a top-level adapter_config.json is a LoRA adapter: it is pulled
the same way, only when it has what vLLM's and SGLang's LoRA loaders read
(adapter_config.json with r, lora_alpha, target_modules and
base_model_name_or_path, and adapter_model.safetensors or .bin), and the
summary names its base model, its rank and its content digest, the identity
the agent loads it by.`;

  static override examples = [
    '<%= config.bin %> models pull Qwen/Qwen2.5-0.5B-Instruct',
    '<%= config.bin %> models pull meta-llama/Llama-3.1-8B-Instruct --revision main --include "*.safetensors" --include "*.json"',
    '<%= config.bin %> models pull org/name --config /etc/llmgw/agent.yaml --json | jq .snapshotPath',
    '<%= config.bin %> models pull acme/support-lora@v3',
  ];

  static override args = {
    repo: Args.string({ description: 'Hub model or adapter id, org/name, or org/name@revision.', required: true }),
  };

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration with the models.* keys (default /etc/llmgw/agent.yaml).', env: 'LLMGW_CONFIG' }),
    revision: Flags.string({ summary: 'Branch, tag or commit (default main; or write the repo as org/name@revision).' }),
    include: Flags.string({ summary: 'Only files matching this pattern (fnmatch, like huggingface-cli --include); repeatable.', multiple: true }),
    verify: Flags.boolean({ summary: 'Hash the files already in the store again; a corrupt one is deleted and fetched anew.', default: false }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(ModelsPull);
    const { checkRepoId, checkRevision } = await import('../../models/repo-id.js');
    const { usageError } = await import('../../lib/errors.js');
    // org/name@rev: a repo id never holds an @ (repo-id.ts), so the first one ends it.
    const at = args.repo.indexOf('@');
    const repo = at < 0 ? args.repo : args.repo.slice(0, at);
    const inline = at < 0 ? undefined : args.repo.slice(at + 1);
    if (inline !== undefined && flags.revision !== undefined && flags.revision !== inline) {
      throw usageError(`${args.repo} names revision ${inline} and --revision names ${flags.revision}; give one`);
    }
    const revision = inline ?? flags.revision ?? 'main';
    checkRepoId(repo);
    checkRevision(revision);
    const { loadModelStore } = await import('../../cli/load-model-store.js');
    const { runModelsPull } = await import('../../models/run-models-pull.js');
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const store = loadModelStore(flags.config);
    const json = this.jsonEnabled();
    const interrupt = onShutdownSignals();
    try {
      const { result, text } = await runModelsPull({
        store,
        request: { repo, revision, include: flags.include ?? [], verify: flags.verify },
        signal: interrupt.signal,
        renderer: json ? 'silent' : process.stderr.isTTY ? 'default' : 'plain',
      });
      this.log(text);
      return result;
    } finally {
      interrupt.dispose();
    }
  }
}
