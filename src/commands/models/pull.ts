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
Progress goes to stderr; stdout gets a summary and the snapshot path.`;

  static override examples = [
    '<%= config.bin %> models pull Qwen/Qwen2.5-0.5B-Instruct',
    '<%= config.bin %> models pull meta-llama/Llama-3.1-8B-Instruct --revision main --include "*.safetensors" --include "*.json"',
    '<%= config.bin %> models pull org/name --config /etc/llmgw/agent.yaml --json | jq .snapshotPath',
  ];

  static override args = {
    repo: Args.string({ description: 'Hub model id, org/name.', required: true }),
  };

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration with the models.* keys (default /etc/llmgw/agent.yaml).', env: 'LLMGW_CONFIG' }),
    revision: Flags.string({ summary: 'Branch, tag or commit.', default: 'main' }),
    include: Flags.string({ summary: 'Only files matching this pattern (fnmatch, like huggingface-cli --include); repeatable.', multiple: true }),
    verify: Flags.boolean({ summary: 'Hash the files already in the store again; a corrupt one is deleted and fetched anew.', default: false }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(ModelsPull);
    const { checkRepoId, checkRevision } = await import('../../models/repo-id.js');
    checkRepoId(args.repo);
    checkRevision(flags.revision);
    const { loadModelStore } = await import('../../cli/load-model-store.js');
    const { runModelsPull } = await import('../../models/run-models-pull.js');
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const store = loadModelStore(flags.config);
    const json = this.jsonEnabled();
    const interrupt = onShutdownSignals();
    try {
      const { result, text } = await runModelsPull({
        store,
        request: { repo: args.repo, revision: flags.revision, include: flags.include ?? [], verify: flags.verify },
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
