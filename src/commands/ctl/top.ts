import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlTop extends BaseCommand {
  static override summary = "A live view of the agent's shards, GPUs and control-plane stream.";

  static override description = `Per shard: state, age, requests in flight, tokens per second now and over
the last minute (sparkline), its GPUs' memory (bar), health; in flight and
tokens/s are the agent's latest reading of the engine, '-' when unknown. Per GPU: memory used/total, health, faults.
The stream's state in the header, the latest events at the bottom. Read from
the admin socket only (Status every --interval, and the Events stream for
changes in between); the engines are never asked anything.
Keys: q or Ctrl-C quits, s cycles the sort (shard, state, age, gpu), / filters
shards by text (Enter applies, Esc clears). When stdout is not a terminal, or
with --once, plain text snapshots instead.
Exit 69 when the agent is not running, 77 when the socket refuses you.`;

  static override examples = [
    '<%= config.bin %> ctl top',
    '# one plain snapshot, e.g. for a ticket',
    '<%= config.bin %> ctl top --once > node-a.txt',
    '<%= config.bin %> ctl top --interval 5s',
  ];

  // A live screen has no result to print as JSON: `ctl status --json` and `ctl events --json` are its machine forms.
  static override enableJsonFlag = false;

  static override flags = {
    ...ctlFlags,
    once: Flags.boolean({ summary: 'Print one plain snapshot and exit, also on a terminal.', default: false }),
    interval: Flags.string({ summary: 'How often Status is read, e.g. 1s or 500ms [default: 1s].', default: '1s' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(CtlTop);
    // The view's modules load here and only here: nothing of it is on the agent's start-up path.
    const { parseDurationArg } = await import('../../lib/duration.js');
    const intervalMs = parseDurationArg('--interval', flags.interval, { positive: true });
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlTop } = await import('../../ctl/top/ctl-top.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    // Ends snapshots (no terminal); the live screen takes Ctrl-C as a key and SIGTERM itself, restoring the terminal first.
    const interrupt = onShutdownSignals();
    process.stdout.on('error', () => interrupt.dispose());
    try {
      await ctlTop({ socket, intervalMs, once: flags.once, signal: interrupt.signal, out: process.stdout, input: process.stdin });
    } finally {
      interrupt.dispose();
    }
  }
}
