import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';

export default class ModelsWarm extends BaseCommand {
  static override summary = "Read a model's files into the host's page cache ahead of its start, within a budget of host RAM.";

  static override description = `A start whose weights are in the page cache reads them at memory speed
instead of from disk. The model must be complete in the store. By default
the warm reads at most half of the host's MemAvailable; --budget sets it, up
to all of MemAvailable, so that what running engines use is not pushed out.
Prints how much of the model is in the page cache before and after (mincore(2), as fincore reads it).`;

  static override examples = [
    '<%= config.bin %> models warm Qwen/Qwen2.5-7B-Instruct',
    '<%= config.bin %> models warm Qwen/Qwen2.5-72B-Instruct --budget 100GiB --json',
  ];

  static override args = {
    repo: Args.string({ description: 'Hub model id, org/name, as models list shows it.', required: true }),
  };

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration with the models.* keys (default /etc/llmgw/agent.yaml).', env: 'LLMGW_CONFIG' }),
    budget: Flags.string({ summary: 'Most bytes of host RAM the warm may take, e.g. 40GiB (default: half of MemAvailable).' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(ModelsWarm);
    const { checkRepoId } = await import('../../models/repo-id.js');
    const { parseByteSize } = await import('../../lib/duration.js');
    const { usageError } = await import('../../lib/errors.js');
    const { formatBytes } = await import('../../lib/format-bytes.js');
    checkRepoId(args.repo);
    const budgetBytes = flags.budget === undefined ? undefined : parseByteSize(flags.budget);
    if (budgetBytes === undefined && flags.budget !== undefined) throw usageError(`--budget ${JSON.stringify(flags.budget)} is not a size; give bytes or a size such as 40GiB`);
    const { loadModelStore } = await import('../../cli/load-model-store.js');
    const { warmModel } = await import('../../models/warm-model.js');
    const store = loadModelStore(flags.config);
    const started = Date.now();
    let said = started;
    const r = await warmModel(store.layout, args.repo, {
      budgetBytes,
      // One warm at a time on the node (the agent's for its control plane included): said, not a silent wait.
      onWait: (pid) => process.stderr.write(`waiting for another warm of the page cache${pid === undefined ? '' : ` (pid ${pid})`} to end\n`),
      // Anything that takes more than a second says how far it is, every 5 s.
      onBytes: (read, of) => {
        if (Date.now() - said < 5000) return;
        said = Date.now();
        process.stderr.write(`warming ${args.repo}: ${formatBytes(read)} of ${formatBytes(of)}\n`);
      },
    });
    const secs = ((Date.now() - started) / 1000).toFixed(1);
    this.log(
      `warmed ${r.repo}: ${formatBytes(r.residentAfter)} of ${formatBytes(r.bytes)} in the page cache (was ${formatBytes(r.residentBefore)}); read ${formatBytes(r.readBytes)} in ${secs}s, budget ${formatBytes(r.budgetBytes)}`,
    );
    return r;
  }
}
