import { Args, Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';
import { DEFAULT_LOG_DIR } from '../../lib/default-paths.js';
import { DEFAULT_CTL_LOG_LINES } from '../../ctl/ctl-defaults.js';
import { MAX_LOG_LINES } from '../../lib/max-log-lines.js';

export default class CtlLogs extends BaseCommand {
  static override summary = "Print a shard's log, also of a run that crashed; -f follows it.";

  static override description = `The last N lines (default 100, at most ${MAX_LOG_LINES}) of the shard's engine
log; for a longer history read <log_dir>/shards/<shard>.log itself. With -f,
new lines as the engine writes them, across log rotation, until Ctrl-C or
until the shard is removed. With the agent down, the log file is read
directly, and a note on stderr says so.

Any shard id whose log is kept can be read, also one the agent no longer
supervises (a generation that crashed and was replaced under a new id, or
forgotten after supervisor.terminal_retention); logs stay until
supervisor.log_retention. --previous is the run before: under the same id
when it was started again, else the run of the same replica that started
before it. --replica R reads R's newest run, with --previous the one before:
the reference control plane gives every retry a new shard id, and the agent
finds a replica's runs by the replica id in their failure records and state
files.

--since and --timestamps use the time each line carries: engines write their
logs themselves, so this is a best effort. A line starting with an RFC 3339
time, SGLang's [YYYY-MM-DD HH:MM:SS] or vLLM's "INFO MM-DD HH:MM:SS" has that
time; a line without one (a traceback) has the time of the timed line before
it, and while following, the time the agent read it. --timestamps prints "-"
for a line whose time is unknown; --since judges such lines by the file's
modification time.`;

  static override examples = [
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -n 500 | grep -i error',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -f',
    '# only the lines written from now on',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 -f -n 0',
    '# a generation that crashed, though the control plane replaced it under a new id',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0',
    '# how the run before this one ended (the same replica\'s earlier shard id, or the same id started again)',
    '<%= config.bin %> ctl logs llama-70b-0-g2-r0 --previous',
    '<%= config.bin %> ctl logs --replica llama-70b-0 --previous',
    '# the last ten minutes, each line with its time',
    '<%= config.bin %> ctl logs llama-70b-0-g2-r0 --since 10m --timestamps',
    '<%= config.bin %> ctl logs llama-70b-0-g2-r0 --since 2026-12-02T10:00:00Z',
    '# the agent is stopped: read the file directly',
    '<%= config.bin %> ctl logs llama-70b-0-g1-r0 --log-dir /var/log/llmgw',
  ];

  // Log lines are the output; there is no result to print as JSON.
  static override enableJsonFlag = false;

  static override args = {
    shard: Args.string({ description: 'Shard id, as `ctl status --all` lists it (or any whose log is kept); may be left out with --replica.' }),
  };

  static override flags = {
    ...ctlFlags,
    // 0 with -f: only what is written from now on, as `tail -n0 -f` and `kubectl logs --tail=0 -f`.
    lines: Flags.integer({ char: 'n', summary: `How many lines from the end, at most ${MAX_LOG_LINES} (0: none; with -f, only new lines).`, default: DEFAULT_CTL_LOG_LINES, min: 0 }),
    follow: Flags.boolean({ char: 'f', summary: 'Keep printing new lines until Ctrl-C or the shard is removed.', default: false }),
    previous: Flags.boolean({
      char: 'p',
      summary: "The previous run's log: the same id's earlier run, else the same replica's run before this one.",
      default: false,
      exclusive: ['follow'],
    }),
    replica: Flags.string({ char: 'r', summary: "A replica's newest run (with --previous, the one before), whatever its shard id.", exclusive: ['follow'] }),
    since: Flags.string({ summary: 'Only lines written since a duration ago (10m, 2h) or an RFC 3339 time (best effort, see above).' }),
    timestamps: Flags.boolean({ summary: 'Each line with the time it was written in front, RFC 3339 UTC; "-" when unknown.', default: false }),
    'log-dir': Flags.string({
      summary: `Where logs are read from when the agent is down [default: supervisor.log_dir from --config, else ${DEFAULT_LOG_DIR}].`,
    }),
  };

  async run(): Promise<void> {
    const { args, flags } = await this.parse(CtlLogs);
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlLogs, parseSince } = await import('../../ctl/ctl-logs.js');
    const { usageError } = await import('../../lib/errors.js');
    if (args.shard === undefined && flags.replica === undefined) throw usageError('name a shard (ctl status --all lists them), or a replica with --replica');
    const sinceMs = flags.since === undefined ? undefined : parseSince(flags.since);
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
        replica: flags.replica,
        sinceMs,
        timestamps: flags.timestamps,
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
