import { Args } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { positiveDurationFlag } from '../../cli/duration-flags.js';
import { formatDuration } from '../../lib/duration.js';

export default class CtlWake extends BaseCommand {
  static override summary = 'Wake a SLEEPING shard: READY once its engine has its memory back and gives its known answer again.';

  static override description = `What a control plane's WakeShard does, asked on this node (issue 39). The
agent asks the engine to wake, waits for its GPUs to hold their memory again,
then for the answer to its known prompt (recorded at the shard's first
READY): an engine woken without its weights answers garbage and is FAILED,
never READY. A refusal names why and leaves the shard as it was. --json
prints the WakeResponse as proto JSON.`;

  static override examples = ['<%= config.bin %> ctl wake tiny-0-g1-r0', '<%= config.bin %> ctl wake tiny-0-g1-r0 --json | jq -r .shard.state'];

  static override args = { shard: Args.string({ description: 'The SLEEPING shard to wake.', required: true }) };

  static override flags = {
    ...ctlFlags,
    timeout: positiveDurationFlag({ summary: 'How long to wait for the engine to be READY [default: 5m].' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(CtlWake);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlWake, describeSleep, DEFAULT_SLEEP_TIMEOUT_MS } = await import('../../ctl/ctl-sleep.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const t0 = performance.now();
    const { noteWhileWaiting } = await import('../../ctl/note-while-waiting.js');
    const timeoutMs = flags.timeout ?? DEFAULT_SLEEP_TIMEOUT_MS;
    const call = ctlWake(socket, args.shard, timeoutMs);
    const response = await noteWhileWaiting(call, `waiting for shard ${args.shard} to be READY with its known answer (at most ${formatDuration(timeoutMs)}, --timeout)…`);
    this.log(describeSleep('wake', response.shard, performance.now() - t0));
    return response;
  }
}
