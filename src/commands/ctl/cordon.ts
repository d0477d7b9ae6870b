import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlCordon extends BaseCommand {
  static override summary = 'Refuse new shards on this node (kubectl cordon); running shards keep serving.';

  static override description = `The agent refuses every new StartShard with the reason, tells the control
plane (Register and Inventory say Cordoned; the reference control plane
places nothing here), and keeps running shards as they are. The cordon is
kept in the state directory (cordon.json), so it outlives agent restarts
until \`llmgw ctl uncordon\`. Cordoning a cordoned node again replaces the
reason. --json prints the CordonResponse as proto JSON.`;

  static override examples = [
    '<%= config.bin %> ctl cordon --reason "replace PSU, ticket OPS-1234"',
    '# the usual maintenance: no new work, move traffic away, wait, stop',
    '<%= config.bin %> ctl cordon --reason maintenance && <%= config.bin %> ctl drain --all --deadline 10m',
  ];

  static override flags = {
    ...ctlFlags,
    reason: Flags.string({ summary: 'Why, shown in every refused start and to the control plane; one line, at most 200 characters.', default: '' }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(CtlCordon);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlCordon, describeCordon } = await import('../../ctl/ctl-cordon.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const response = await ctlCordon(socket, true, flags.reason.trim());
    this.log(describeCordon(response));
    return response;
  }
}
