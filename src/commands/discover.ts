import { create } from '@bufbuild/protobuf';
import { Flags } from '@oclif/core';
import { BaseCommand } from '../cli/base-command.js';
import { runPreflight } from '../agent/discovery/preflight.js';
import { renderDiscoverReport } from '../agent/discovery/render-discover-report.js';
import { resolveDiscoverSettings } from '../agent/discovery/resolve-discover-settings.js';
import { type DiscoverRenderer, runDiscoverTasks } from '../agent/discovery/run-discover-tasks.js';
import { DiscoverReportSchema } from '../gen/llmgw/v1/discover_pb.js';
import { failure } from '../lib/errors.js';
import { createLogger } from '../lib/logger.js';
import { toProtoJson } from '../lib/proto-json.js';

export default class Discover extends BaseCommand {
  static override summary = 'Show the GPUs, topology, HCAs and network the agent would report, and whether the node is fit to serve.';

  static override description = `Runs nvidia-smi (each call bounded by --timeout) and reads sysfs. A missing or
hung driver is not an error: the report says why there are no GPUs. With
--config, preflight checks judge the node against the agent's configuration:
driver present, every GPU healthy, no foreign process on a GPU, each configured
fabric's HCA ACTIVE, mgmt_interface with an IPv4 address. --strict exits 1
when a check fails (without --config, the hardware checks only).`;

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
    timeout: Flags.string({ summary: 'Limit for each nvidia-smi call, e.g. 10s (overrides discovery.timeout).' }),
    strict: Flags.boolean({ summary: 'Exit 1 when a preflight check fails.' }),
  };

  async run(): Promise<unknown> {
    const { flags } = await this.parse(Discover);
    const settings = resolveDiscoverSettings({
      config: flags.config,
      nvidiaSmi: flags['nvidia-smi'],
      sysfsRoot: flags['sysfs-root'],
      timeout: flags.timeout,
    });
    // The report carries every finding; logs would only repeat it.
    const logger = await createLogger({ level: flags['log-level'] ?? 'error' });
    const json = this.jsonEnabled();
    const renderer: DiscoverRenderer = json ? 'silent' : process.stdout.isTTY && process.stderr.isTTY ? 'default' : 'simple';

    const inventory = await runDiscoverTasks({ ...settings, renderer, logger });
    const checks =
      settings.fromConfig || flags.strict
        ? runPreflight(inventory, {
            fabrics: settings.fabrics,
            mgmtInterface: settings.fromConfig ? settings.mgmtInterface : '',
            foreignMemoryShare: settings.foreignMemoryShare,
          })
        : [];
    const failed = checks.filter((c) => !c.ok);
    const report = toProtoJson(DiscoverReportSchema, create(DiscoverReportSchema, { inventory, checks }));

    if (!json) this.log(renderDiscoverReport(inventory, { mgmtInterface: settings.mgmtInterface, checks }));
    if (flags.strict && failed.length > 0) {
      if (json) {
        this.logJson(report);
        return this.exit(1);
      }
      throw failure(`preflight failed: ${failed.map((c) => c.name).join(', ')}`);
    }
    return report;
  }
}
