import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlUncordon extends BaseCommand {
  static override summary = 'Let new shards start on this node again (undoes ctl cordon).';

  static override description = `Removes the cordon (and its file in the state directory) and tells the control
plane, which may place shards here again. Drained shards stay DRAINING: undo
that with \`llmgw ctl drain --cancel\`. A node that was not cordoned is left as
it is (exit 0). --json prints the CordonResponse as proto JSON.`;

  static override examples = ['<%= config.bin %> ctl uncordon', '<%= config.bin %> ctl uncordon && <%= config.bin %> ctl drain --cancel --all'];

  static override flags = { ...ctlFlags };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(CtlUncordon);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlCordon, describeCordon } = await import('../../ctl/ctl-cordon.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const response = await ctlCordon(socket, false);
    this.log(describeCordon(response));
    return response;
  }
}
