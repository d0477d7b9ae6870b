import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { DEFAULT_CONFIG_PATH } from '../../lib/default-paths.js';
import type { LoadConfigOptions } from '../../agent/config/load-agent-config.js';
import { AGENT_RUN_OVERRIDES, startAgent } from '../../cli/fast-agent-run.js';

export default class AgentRun extends BaseCommand {
  static override summary = 'Run the node agent: discover hardware, hold the control-plane stream, supervise engines.';

  static override description = `Configuration comes from the YAML file (--config), then LLMGW_* environment
variables, then these flags; --print-config shows the result and where each
value came from, and checks what a start checks (required keys, admin.group,
the trusted directories, the TLS files), exiting 78 when the agent would not
start. Exits 78 on a configuration error (systemd: RestartPreventExitStatus=78).`;

  static override examples = [
    '<%= config.bin %> agent run --config /etc/llmgw/agent.yaml',
    '<%= config.bin %> agent run --config examples/agent.yaml --print-config',
    '# on a new node: what is set, and which required keys are missing',
    '<%= config.bin %> agent run --print-config',
    // Loopback: a plaintext server elsewhere is refused without insecure_plaintext, and https:// wants tls.* set.
    'LLMGW_SERVER=http://127.0.0.1:8443 <%= config.bin %> agent run --node-id gpu-node-01 --print-config --json',
  ];

  // Run by systemd: an operator's `llmgw config` (output.json, color) must not change it.
  static override honoursPreferences = false;

  static override flags = {
    config: Flags.string({ char: 'c', summary: `Configuration file [default: ${DEFAULT_CONFIG_PATH}].`, env: 'LLMGW_CONFIG' }),
    'print-config': Flags.boolean({ summary: 'Print the effective configuration and where each value came from, then exit.' }),
    'node-id': Flags.string({ summary: 'Overrides node_id.' }),
    server: Flags.string({ summary: 'Overrides server (http:// or https://).' }),
    protocol: Flags.string({ summary: 'Overrides protocol (connect or grpc).' }),
    'state-dir': Flags.string({ summary: 'Overrides supervisor.state_dir.' }),
    'log-dir': Flags.string({ summary: 'Overrides supervisor.log_dir.' }),
    socket: Flags.string({ summary: 'Overrides admin.socket.' }),
    'heartbeat-interval': Flags.string({ summary: 'Overrides heartbeat_interval, e.g. 5s.' }),
    'metrics-addr': Flags.string({ summary: 'Overrides metrics_addr, e.g. 127.0.0.1:9400.' }),
    'nvidia-smi': Flags.string({ summary: 'Overrides discovery.nvidia_smi.' }),
    'sysfs-root': Flags.string({ summary: 'Overrides discovery.sysfs_root.' }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(AgentRun);
    const options: LoadConfigOptions = {
      configPath: flags.config,
      flags: {
        ...Object.fromEntries(Object.entries(AGENT_RUN_OVERRIDES).map(([flag, key]) => [key, flags[flag as keyof typeof AGENT_RUN_OVERRIDES]])),
        log_level: flags['log-level'],
      },
    };

    if (flags['print-config']) {
      const { configAsJson, loadConfigForPrint, renderConfigTable, startRefusals, wouldStart } = await import('../../agent/config/print-config.js');
      const printable = loadConfigForPrint(options);
      // The table (or JSON) either way, then the exit `agent run` would give: it is the config's pre-flight check.
      if (wouldStart(printable)) {
        if (this.jsonEnabled()) return configAsJson(printable);
        this.log(renderConfigTable(printable));
        return undefined;
      }
      if (this.jsonEnabled()) this.logJson(configAsJson(printable));
      else this.log(renderConfigTable(printable));
      for (const line of startRefusals(printable)) process.stderr.write(`error: the agent would not start: ${line}\n`);
      this.exit(78);
    }
    // The same start as bin/run.js's path without oclif (fast-agent-run.ts).
    await startAgent(options, this.config.version);
    // Engines are detached and keep running; leftover HTTP/2 sessions must
    // not hold the process open past an orderly stop.
    this.exit(0);
  }
}
