import { Flags } from '@oclif/core';
import { BaseCommand } from '../cli/base-command.js';
import { positiveDurationFlag } from '../cli/duration-flags.js';
import { formatDuration } from '../lib/duration.js';

export default class Discover extends BaseCommand {
  static override summary = 'Show the GPUs, topology, HCAs and network the agent would report, and whether the node is fit to serve.';

  static override description = `Runs nvidia-smi (each call bounded by --timeout) and reads sysfs. A missing or
hung driver is not an error: the report says why there are no GPUs. With
--config, preflight checks judge the node against the agent's configuration:
driver present, every GPU healthy, no foreign process on a GPU, each configured
fabric's HCA ACTIVE, mgmt_interface with an IPv4 address. --strict exits 1
when a check fails (without --config, the hardware checks only); with --json
the report is then in the error report (error.inventory, error.checks).`;

  static override examples = [
    '<%= config.bin %> discover',
    '<%= config.bin %> discover --config /etc/llmgw/agent.yaml --strict',
    '<%= config.bin %> discover --json | jq .inventory.gpus',
    'LLMGW_FAKE_GPUS=pcie-l40sx4 <%= config.bin %> discover --nvidia-smi bin/fake-nvidia-smi --sysfs-root fixtures/sysfs/hgx-h100x8',
  ];

  static override flags = {
    config: Flags.string({ char: 'c', summary: 'Agent configuration: takes discovery.*, fabrics and mgmt_interface from it, and runs preflight checks.' }),
    'nvidia-smi': Flags.string({ summary: 'nvidia-smi executable (overrides discovery.nvidia_smi).' }),
    'sysfs-root': Flags.string({ summary: 'Root under which /sys is read (overrides discovery.sysfs_root).' }),
    timeout: positiveDurationFlag({ summary: 'Limit for each nvidia-smi call, e.g. 10s (overrides discovery.timeout).' }),
    strict: Flags.boolean({ summary: 'Exit 1 when a preflight check fails.' }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(Discover);
    const { discoverReport } = await import('../agent/discovery/discover-report.js');
    const json = this.jsonEnabled();
    const { report, text } = await discoverReport(
      {
        config: flags.config,
        nvidiaSmi: flags['nvidia-smi'],
        sysfsRoot: flags['sysfs-root'],
        timeout: flags.timeout === undefined ? undefined : formatDuration(flags.timeout),
        strict: flags.strict,
        logLevel: flags['log-level'],
        renderer: json ? 'silent' : process.stdout.isTTY && process.stderr.isTTY ? 'default' : 'simple',
        text: !json,
      },
      (t) => this.log(t),
    );
    if (text !== undefined) this.log(text);
    return report;
  }
}
