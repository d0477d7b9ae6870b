import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { positiveDurationFlag } from '../../cli/duration-flags.js';
import { formatDuration } from '../../lib/duration.js';

export default class CtlSleep extends BaseCommand {
  static override summary = "Put a READY shard to sleep: its engine frees its GPU memory and stays up, for a fast wake.";

  static override description = `What a control plane's SleepShard does, asked on this node (issue 39): the
shard's profile must have sleep_mode (vLLM sleep mode, SGLang's memory saver)
and its engine a sleep API. Level 1 moves the weights to host RAM (the wake
is fast); level 2 drops them (the wake reloads them). The shard is SLEEPING
once its GPUs hold little, and the control plane routes traffic elsewhere;
\`llmgw ctl wake\` brings it back, READY only once it gives its known answer
again. A refusal names why and leaves the shard as it was. --json prints the
SleepResponse as proto JSON.`;

  static override examples = [
    '<%= config.bin %> ctl sleep tiny-0-g1-r0',
    '<%= config.bin %> ctl sleep tiny-0-g1-r0 --level 2',
    '<%= config.bin %> ctl sleep tiny-0-g1-r0 && <%= config.bin %> ctl wake tiny-0-g1-r0',
  ];

  static override args = { shard: Args.string({ description: 'The shard to put to sleep (llmgw ctl status lists them).', required: true }) };

  static override flags = {
    ...ctlFlags,
    level: Flags.integer({ summary: '1: weights to host RAM (fast wake); 2: weights dropped (reloaded at wake).', min: 1, max: 2, default: 1 }),
    timeout: positiveDurationFlag({ summary: 'How long to wait for the engine to be asleep [default: 5m].' }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(CtlSleep);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlSleep, describeSleep, DEFAULT_SLEEP_TIMEOUT_MS } = await import('../../ctl/ctl-sleep.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const t0 = performance.now();
    const { noteWhileWaiting } = await import('../../ctl/note-while-waiting.js');
    const timeoutMs = flags.timeout ?? DEFAULT_SLEEP_TIMEOUT_MS;
    const call = ctlSleep(socket, args.shard, flags.level === 2 ? 2 : 1, timeoutMs);
    const response = await noteWhileWaiting(call, `waiting for shard ${args.shard} to free its GPU memory (at most ${formatDuration(timeoutMs)}, --timeout)…`);
    this.log(describeSleep('sleep', response.shard, performance.now() - t0));
    return response;
  }
}
