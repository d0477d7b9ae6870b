import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../../cli/base-command.js';
import { storedCtlPaths } from '../../../cli/cli-preferences.js';
import { ctlFlags } from '../../../cli/ctl-flags.js';
import { usageError } from '../../../lib/errors.js';

export default class CtlGpuClear extends BaseCommand {
  static override summary = "Clear a GPU's faults after you reset it (or judged it sound).";

  static override description = `An Xid fault (e.g. Xid 48, 94, 95) holds until the GPU is reset, which the
agent can only see for a GPU that fell off the bus and answers again. After
\`nvidia-smi -r -i <index>\` (or a check of your own), this tells the agent
the GPU is fit: new StartShards may use it, the shards on it go back to their
own health, the control plane gets a GpuEvent CLEARED_BY_OPERATOR, and the
agent's log records it with your uid ("GPU faults cleared by an operator").
A GPU that is still faulty raises its fault again at the next event or poll.
--json prints the ClearGpuFaultResponse as proto JSON.`;

  static override examples = [
    '<%= config.bin %> ctl gpu clear 2 --reason "reset with nvidia-smi -r -i 2, OPS-1234"',
    '<%= config.bin %> ctl status --json | jq \'.gpus[] | select(.healthy | not) | .index\'',
  ];

  static override args = {
    index: Args.string({ description: 'The GPU index, as `llmgw ctl status` lists it.', required: true }),
  };

  static override flags = {
    ...ctlFlags,
    reason: Flags.string({ summary: 'Why, for the log and the control plane; one line, at most 200 characters.', default: '' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(CtlGpuClear);
    if (!/^\d{1,4}$/.test(args.index)) throw usageError(`GPU index must be a number such as 2, got ${JSON.stringify(args.index.slice(0, 20))}`);
    const index = Number(args.index);
    const { resolveCtlPaths } = await import('../../../ctl/resolve-ctl-paths.js');
    const { ctlGpuClear, describeGpuClear } = await import('../../../ctl/ctl-gpu-clear.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const response = await ctlGpuClear(socket, index, flags.reason.trim());
    if (this.jsonEnabled()) return response;
    this.log(describeGpuClear(index, response));
    return response;
  }
}
