import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';

export default class ModelsList extends BaseCommand {
  static override summary = 'List the models and LoRA adapters in the node-local store: revisions, complete or partial, size, last use, pins, an adapter\'s base and rank.';

  static override description = `Reads models.cache_dir. A model is complete when every file its pulls
listed was verified and linked; partial while a pull runs or after one that
stopped (pull again to resume); one an engine fetched by itself has no
record and shows as partial. IN MEMORY is how much of it the page cache
holds now (fincore): a start reads that at memory speed (llmgw models warm
fills it). PINNED BY names the shards using it, which eviction and rm never
touch. KIND is model or adapter; a LoRA adapter's BASE is the model it was
trained on (adapter_config.json base_model_name_or_path) and RANK its r.`;

  static override examples = ['<%= config.bin %> models list', '<%= config.bin %> models list --json | jq ".models[] | select(.complete)"'];

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration with the models.* keys (default /etc/llmgw/agent.yaml).', env: 'LLMGW_CONFIG' }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(ModelsList);
    const { loadModelStore } = await import('../../cli/load-model-store.js');
    const { scanStore } = await import('../../models/scan-store.js');
    const { renderModelsList } = await import('../../models/render-models-list.js');
    const { compileCacheBytes } = await import('../../models/compile-cache-bytes.js');
    const store = loadModelStore(flags.config);
    const { modelBlobFiles, pageCacheResidency } = await import('../../models/page-cache.js');
    const [models, compileBytes] = await Promise.all([scanStore(store.layout), compileCacheBytes(store.layout, store.budget)]);
    // What of each model the page cache holds now; unknown (no fincore, no files) is left out.
    const resident = new Map<string, number>();
    for (const m of models) {
      const files = await modelBlobFiles(store.layout, m.repo);
      if (files.length === 0) continue;
      const r = await pageCacheResidency(files.map((f) => f.path)).catch(() => undefined);
      if (r) resident.set(m.repo, r.residentBytes);
    }
    if (!this.jsonEnabled()) this.log(renderModelsList(models, store.budget, compileBytes, Date.now(), resident));
    // bytes: what counts against the budget, the compile caches included.
    return {
      cacheDir: store.layout.cacheDir,
      budget: store.budget,
      bytes: models.reduce((s, m) => s + m.bytes, 0) + compileBytes,
      compileBytes,
      models: models.map((m) => ({ ...m, ...(resident.has(m.repo) ? { residentBytes: resident.get(m.repo) } : {}) })),
    };
  }
}
