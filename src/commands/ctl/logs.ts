import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { DEFAULT_LOG_DIR } from '../../lib/default-paths.js';
import { DEFAULT_CTL_LOG_LINES } from '../../ctl/ctl-defaults.js';
import { MAX_LOG_LINES } from '../../lib/max-log-lines.js';

export default class CtlLogs extends BaseCommand {
  static override summary = "Print a shard's log; -f follows it.";

  static override description = `The last N lines (default 100, at most ${MAX_LOG_LINES}) of the shard's engine
log; for a longer history read <log_dir>/shards/<shard>.log itself. With -f,
new lines as the engine writes them, across log rotation, until Ctrl-C or
until the shard is removed. With the agent down, the log file is read
directly, and a note on stderr says so.`;

  static override examples = [
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -n 500 | grep -i error',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -f',
    '# only the lines written from now on',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -f -n 0',
    '# how the run before this one ended (after a crash and a restart under the same id)',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 --previous',
    '# the agent is stopped: read the file directly',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 --log-dir /var/log/llmgw',
  ];

  // Log lines are the output; there is no result to print as JSON.
  static override enableJsonFlag = false;

  static override args = {
    shard: Args.string({ description: 'Shard id, as `ctl status` lists it.', required: true }),
  };

  static override flags = {
    ...ctlFlags,
    // 0 with -f: only what is written from now on, as `tail -n0 -f` and `kubectl logs --tail=0 -f`.
    lines: Flags.integer({ char: 'n', summary: `How many lines from the end, at most ${MAX_LOG_LINES} (0: none; with -f, only new lines).`, default: DEFAULT_CTL_LOG_LINES, min: 0 }),
    follow: Flags.boolean({ char: 'f', summary: 'Keep printing new lines until Ctrl-C or the shard is removed.', default: false }),
    previous: Flags.boolean({
      char: 'p',
      summary: "The previous run's log: kept when the shard id is started again, at <log_dir>/previous-runs/<shard>.1.log.",
      default: false,
      exclusive: ['follow'],
    }),
    'log-dir': Flags.string({
      summary: `Where logs are read from when the agent is down [default: supervisor.log_dir from --config, else ${DEFAULT_LOG_DIR}].`,
    }),
  };

  async run(): Promise<void> {
    const { args, flags } = await this.parse(CtlLogs);
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlLogs } = await import('../../ctl/ctl-logs.js');
    const paths = await resolveCtlPaths({ socket: flags.socket, logDir: flags['log-dir'], configPath: flags.config, stored: storedCtlPaths(this.preferences), needLogDir: true });
    // Ctrl-C ends a follow as a success; a second one exits at once.
    const interrupt = onShutdownSignals();
    // `ctl logs | head` closes the pipe: stop quietly.
    process.stdout.on('error', () => interrupt.dispose());
    try {
      await ctlLogs({
        socket: paths.socket,
        logDir: paths.logDir,
        adminGroup: paths.adminGroup,
        shardId: args.shard,
        lines: flags.lines,
        follow: flags.follow,
        previous: flags.previous,
        signal: interrupt.signal,
        write: (lines) => {
          if (lines.length > 0) process.stdout.write(`${lines.join('\n')}\n`);
        },
        note: (text) => process.stderr.write(`${text}\n`),
      });
    } finally {
      interrupt.dispose();
    }
  }
}
