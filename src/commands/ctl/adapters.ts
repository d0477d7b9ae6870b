import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { positiveDurationFlag } from '../../cli/duration-flags.js';

export default class CtlAdapters extends BaseCommand {
  static override summary = "Show a shard's LoRA adapters, or load or unload one as the control plane would.";

  static override description = `Each adapter of the shard's desired set and each its engine still serves:
its state (PULLING, LOADING, LOADED, UNLOADING, FAILED), rank, the engine's
load time, content digest and why (how it was proven, or what failed).
--load name=org/repo[@revision] adds one to the desired set (replacing one
of that name) and --unload name removes one, as a SetAdapters from the
control plane would, with the same checks; the answer comes once the set is
reconciled. Loading and unloading need the admin group's rights and are
audited with your uid. --json prints the AdaptersResponse as proto JSON.`;

  static override examples = [
    '<%= config.bin %> ctl adapters chat-0',
    '<%= config.bin %> ctl adapters chat-0 --load tenant-a=acme/llama3-tenant-a-lora@v3',
    '<%= config.bin %> ctl adapters chat-0 --unload tenant-a',
    '<%= config.bin %> ctl adapters chat-0 --json',
  ];

  static override args = { shard: Args.string({ description: 'The shard (llmgw ctl status lists them).', required: true }) };

  static override flags = {
    ...ctlFlags,
    load: Flags.string({ summary: 'Add an adapter: name=org/repo or name=org/repo@revision.', exclusive: ['unload'] }),
    pinned: Flags.boolean({ summary: 'With --load: the engine never evicts it for another (SGLang).', dependsOn: ['load'] }),
    unload: Flags.string({ summary: 'Remove the adapter of this name from the desired set.', exclusive: ['load'] }),
    timeout: positiveDurationFlag({ summary: 'How long to wait for the set to be reconciled [default: 5m].' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(CtlAdapters);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlAdapters, parseLoadFlag, renderAdapters, DEFAULT_ADAPTERS_TIMEOUT_MS } = await import('../../ctl/ctl-adapters.js');
    const load = flags.load === undefined ? undefined : parseLoadFlag(flags.load, flags.pinned === true);
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const response = await ctlAdapters(socket, args.shard, { load, unload: flags.unload }, flags.timeout ?? DEFAULT_ADAPTERS_TIMEOUT_MS);
    this.log(renderAdapters(response));
    return response;
  }
}
