import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { positiveDurationFlag } from '../../cli/duration-flags.js';
import { DEFAULT_CTL_DRAIN_TIMEOUT_MS } from '../../ctl/ctl-defaults.js';
import { formatDuration } from '../../lib/duration.js';

export default class CtlDrain extends BaseCommand {
  static override summary = 'Mark a shard (or every serving one) DRAINING; --wait until its requests finish.';

  static override description = `DRAINING is reported to the control plane, which routes new requests
elsewhere; the engine keeps serving the ones it has. With --wait, the
in-flight count of each shard is shown going to zero: exit 0 when every shard
reaches zero, exit 1 at --timeout with the count left. The shards stay
DRAINING either way, across agent restarts too (the drain is recorded in the
shard's state file); stopping them is the control plane's decision, and
--cancel undoes the drain. --json prints the last DrainResponse as proto JSON;
at --timeout, the error report with that response as error.drain. The
progress goes to stderr and the result to stdout, so on one pipe (2>&1) each
shard's last line shows twice by design; 2>/dev/null keeps the result only.`;

  static override examples = [
    '<%= config.bin %> ctl drain llama-70b-0-g1-r0',
    '<%= config.bin %> ctl drain llama-70b-0-g1-r0 --wait --timeout 10m',
    '# before maintenance: everything on this node',
    '<%= config.bin %> ctl drain --all --wait && sudo systemctl stop llmgw-agent',
    '# with a bound: exit 0 once nothing is in flight, exit 1 (with what is left) after 10 minutes',
    '<%= config.bin %> ctl cordon --reason maintenance && <%= config.bin %> ctl drain --all --deadline 10m',
    '# after maintenance: traffic may return (the drain outlived the agent restart)',
    '<%= config.bin %> ctl drain --cancel llama-70b-0-g1-r0',
  ];

  static override args = {
    shard: Args.string({ description: 'Shard id, as `ctl status` lists it (or --all).', required: false }),
  };

  static override flags = {
    ...ctlFlags,
    all: Flags.boolean({ summary: 'Every READY or UNHEALTHY shard on this node.', default: false }),
    cancel: Flags.boolean({
      summary: 'Undo the drain: the DRAINING shard (or every one, with --all) becomes READY, and the control plane is told.',
      default: false,
      exclusive: ['wait'],
    }),
    wait: Flags.boolean({ summary: 'Show the in-flight count until it reaches zero (exit 0) or --timeout passes (exit 1).', default: false }),
    timeout: positiveDurationFlag({ summary: 'How long --wait waits, e.g. 30s, 10m.', default: DEFAULT_CTL_DRAIN_TIMEOUT_MS, defaultHelp: async () => formatDuration(DEFAULT_CTL_DRAIN_TIMEOUT_MS) }),
    // The maintenance spelling (Nomad's `node drain -deadline`): one flag that waits, with its bound.
    deadline: positiveDurationFlag({ summary: '--wait with this --timeout: drain, then exit 0 when in-flight reaches zero or 1 when the deadline passes, e.g. 10m.', exclusive: ['timeout', 'cancel'] }),
  };

  async run(): Promise<unknown> {
    const { args, flags } = await this.parse(CtlDrain);
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { runCtlDrain } = await import('../../ctl/run-ctl-drain.js');
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const json = this.jsonEnabled();
    const interrupt = onShutdownSignals();
    try {
      // A timeout is thrown, and reported by BaseCommand.catch like every error (with --json, the drain's last progress as error.drain).
      const { response, text } = await runCtlDrain({
        socket,
        shardId: args.shard,
        all: flags.all,
        wait: flags.wait || flags.deadline !== undefined,
        cancel: flags.cancel,
        timeoutMs: flags.deadline ?? flags.timeout,
        signal: interrupt.signal,
        renderer: json ? 'silent' : process.stderr.isTTY ? 'default' : 'simple',
      });
      this.log(text);
      return response;
    } finally {
      interrupt.dispose();
    }
  }
}
