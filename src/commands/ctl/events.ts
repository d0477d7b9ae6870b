import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { storedCtlPaths } from '../../cli/cli-preferences.js';
import { ctlFlags } from '../../cli/ctl-flags.js';

export default class CtlEvents extends BaseCommand {
  static override summary = "Print the agent's recent state changes; -f follows them.";

  static override description = `The last events the agent keeps in memory (at most 1000): shard state
transitions with why, GPU faults and their clearing, the control-plane
stream's phase, starts and drains the agent refused, and what became of the
engines a previous agent left. With -f, each new event the moment the agent
records it, until Ctrl-C. --json prints one AgentEvent (proto JSON) per line.
Exit 69 when the agent is not running, 77 when the socket refuses you.`;

  static override examples = [
    '<%= config.bin %> ctl events',
    '<%= config.bin %> ctl events -f',
    '# what happened in the last ten minutes',
    '<%= config.bin %> ctl events --since 10m',
    '<%= config.bin %> ctl events --since 2026-12-02T02:00:00Z',
    '# every GPU fault, as JSON lines',
    '<%= config.bin %> ctl events --json | jq -c \'select(.kind == "gpu")\'',
  ];

  // --json is the base command's; each event is printed as it comes, one object a line, rather than one result at the end.
  static override flags = {
    ...ctlFlags,
    follow: Flags.boolean({ char: 'f', summary: 'Keep printing new events as they happen, until Ctrl-C.', default: false }),
    since: Flags.string({ summary: 'Only events from this long ago (10m, 1h) or since this RFC 3339 time [default: all the agent keeps].' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(CtlEvents);
    const { parseSince } = await import('../../ctl/parse-since.js');
    const sinceMs = flags.since === undefined ? 0 : parseSince(flags.since, Date.now());
    const { onShutdownSignals } = await import('../../lib/on-shutdown-signals.js');
    const { resolveCtlPaths } = await import('../../ctl/resolve-ctl-paths.js');
    const { ctlEvents } = await import('../../ctl/ctl-events.js');
    const { socket } = await resolveCtlPaths({ socket: flags.socket, configPath: flags.config, stored: storedCtlPaths(this.preferences) });
    const json = this.jsonEnabled();
    const { toJsonString } = await import('@bufbuild/protobuf');
    const { AgentEventSchema } = await import('../../gen/llmgw/v1/admin_pb.js');
    const { renderAgentEvent } = await import('../../ctl/render-agent-event.js');
    // Ctrl-C ends a follow as a success; a second one exits at once.
    const interrupt = onShutdownSignals();
    // `ctl events | head` closes the pipe: stop quietly.
    process.stdout.on('error', () => interrupt.dispose());
    try {
      await ctlEvents({
        socket,
        follow: flags.follow,
        sinceMs,
        signal: interrupt.signal,
        write: (e) => process.stdout.write(`${json ? toJsonString(AgentEventSchema, e) : renderAgentEvent(e)}\n`),
      });
    } finally {
      interrupt.dispose();
    }
  }
}
