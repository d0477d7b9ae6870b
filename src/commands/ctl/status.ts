import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlStatus extends BaseCommand {
  static override summary = "Show the running agent: node, control-plane connection, hardware and shards.";

  static override description = `Asks the agent over its admin socket. The connection line says since when it
is connected, or, while it is retrying, the attempt, the next try and the last
error. The table lists the shards the agent supervises: shard, replica,
engine, model, state, pid, port, GPUs, age, and whether it was adopted from a
previous agent. Shards that ended (STOPPED, FAILED, EXITED) and whose engine
is gone are left out unless --all (one that may still run holds its GPUs and
is always listed); the agent forgets them after supervisor.terminal_retention
or beyond supervisor.keep_terminal_shards, and their logs stay readable with
ctl logs. --state shows only the states named. The agent applies the filter,
to --json as well. --json prints the StatusResponse as proto JSON.
Exit 69 when the agent is not running, 77 when the socket refuses you.`;

  static override examples = [
    '<%= config.bin %> ctl status',
    '# also the shards that ended (a crash loop\'s generations)',
    '<%= config.bin %> ctl status --all',
    '<%= config.bin %> ctl status --state failed,exited',
    '<%= config.bin %> ctl status --json | jq -r \'.shards[] | select(.state != "SHARD_STATE_READY") | .shardId\'',
    'LLMGW_SOCKET=/tmp/agent.sock <%= config.bin %> ctl status',
  ];

  // bin/run.js answers the plain forms (--json, --socket, --config) without
  // loading oclif, through src/cli/fast-ctl-status.ts, which mirrors these
  // flags (and ctl-flags.ts): change them together.
  static override flags = {
    ...ctlFlags,
    all: Flags.boolean({ char: 'a', summary: 'Also the shards that ended: FAILED, EXITED, STOPPED.', default: false }),
    state: Flags.string({
      summary: 'Only shards in these states, comma-separated, any case: STARTING, READY, UNHEALTHY, DRAINING, STOPPING, STOPPED, FAILED, EXITED, SLEEPING.',
    }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(CtlStatus);
    // Imported here, not above: `--help` and the manifest need none of it.
    const { runCtlStatus } = await import('../../ctl/run-ctl-status.js');
    const { parseStateFilter } = await import('../../ctl/filter-status-shards.js');
    const filter = { all: flags.all, states: flags.state === undefined ? undefined : parseStateFilter(flags.state) };
    const where = { socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) };
    const { status, text } = await runCtlStatus(where, this.jsonEnabled(), filter);
    if (text !== undefined) this.log(text);
    return status;
  }
}
