import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlStatus extends BaseCommand {
  static override summary = "Show the running agent: node, control-plane connection, hardware and shards.";

  static override description = `Asks the agent over its admin socket. The connection line says since when it
is connected, or, while it is retrying, the attempt, the next try and the last
error. The table lists every shard the agent supervises: shard, replica,
engine, model, state, pid, port, GPUs, age, and whether it was adopted from a
previous agent. --json prints the StatusResponse as proto JSON.
Exit 69 when the agent is not running, 77 when the socket refuses you.`;

  static override examples = [
    '<%= config.bin %> ctl status',
    '<%= config.bin %> ctl status --json | jq -r \'.shards[] | select(.state != "SHARD_STATE_READY") | .shardId\'',
    'LLMGW_SOCKET=/tmp/agent.sock <%= config.bin %> ctl status',
  ];

  // bin/run.js answers the plain forms (--json, --socket, --config) without
  // loading oclif, through src/cli/fast-ctl-status.ts, which mirrors these
  // flags (and ctl-flags.ts): change them together.
  static override flags = { ...ctlFlags };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(CtlStatus);
    // Imported here, not above: `--help` and the manifest need none of it.
    const { runCtlStatus } = await import('../../ctl/run-ctl-status.js');
    const { status, text } = await runCtlStatus({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) }, this.jsonEnabled());
    if (text !== undefined) this.log(text);
    return status;
  }
}
