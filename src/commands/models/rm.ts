import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';

export default class ModelsRm extends BaseCommand {
  static override summary = 'Remove a model or LoRA adapter from the node-local store, unless a shard pins it or a pull is in progress.';

  static override description = `Deletes the model's folder from the hub cache under models.cache_dir, every
revision of it, and the engines' compile caches of it. A model a shard pins,
or one a pull is writing, is refused with the reason and kept. Nothing else
of the store is touched; \`llmgw models list\` shows what is there.`;

  static override examples = ['<%= config.bin %> models rm Qwen/Qwen2.5-0.5B-Instruct'];

  static override args = {
    repo: Args.string({ description: 'Hub model or adapter id, org/name, as models list shows it.', required: true }),
  };

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration with the models.* keys (default /etc/llmgw/agent.yaml).', env: 'LLMGW_CONFIG' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(ModelsRm);
    const { checkRepoId } = await import('../../models/repo-id.js');
    checkRepoId(args.repo);
    const { loadModelStore } = await import('../../cli/load-model-store.js');
    const { removeModelOrFail } = await import('../../models/remove-model.js');
    const store = loadModelStore(flags.config);
    await removeModelOrFail(store.layout, args.repo);
    this.log(`removed ${args.repo}`);
    return { repo: args.repo, removed: true };
  }
}
