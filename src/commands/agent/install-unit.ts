import { Flags } from '@oclif/core';
import { type InstalledAgentUnit, installAgentUnit } from '../../agent/install/install-agent-unit.js';
import { DEFAULT_CONFIG_PATH } from '../../agent/config/config-keys.js';
import { BaseCommand } from '../../cli/base-command.js';

export default class AgentInstallUnit extends BaseCommand {
  static override summary = 'Write the systemd unit for the agent, with this installation\'s absolute paths.';

  static override description = [
    "Writes llmgw-agent.service to /etc/systemd/system with ExecStart naming this installation's node executable and bin/run.js by absolute path, so the unit starts wherever npm put the package (/usr/bin, /usr/local/bin, an nvm tree). Run it again after moving or upgrading Node.",
    'It replaces an earlier llmgw-agent.service: put local changes in a drop-in (systemctl edit llmgw-agent), which it leaves alone.',
  ].join('\n\n');

  static override examples = [
    '<%= config.bin %> agent install-unit && systemctl daemon-reload && systemctl enable --now llmgw-agent',
    // systemd-analyze verify needs a file named like a unit: /dev/stdin is refused ("Failed to prepare filename").
    '<%= config.bin %> agent install-unit --config /etc/llmgw/agent.yaml --output /tmp/llmgw-agent.service && systemd-analyze verify /tmp/llmgw-agent.service',
    '<%= config.bin %> agent install-unit --root /mnt/image --json',
  ];

  static override flags = {
    config: Flags.string({ char: 'c', summary: `Configuration the unit runs the agent with [default: ${DEFAULT_CONFIG_PATH}].` }),
    root: Flags.string({ summary: 'Write under this root (ROOT/etc/systemd/system), e.g. an image being built.', exclusive: ['output'] }),
    output: Flags.string({ char: 'o', summary: 'Write exactly this file instead; - prints the unit.', exclusive: ['root'] }),
  };

  async run(): Promise<Omit<InstalledAgentUnit, 'text'> & { text?: string }> {
    const { flags } = await this.parse(AgentInstallUnit);
    const unit = await installAgentUnit({ configPath: flags.config, root: flags.root, output: flags.output });
    const { text, ...report } = unit;
    // The text only when nothing was written: otherwise it is in the file the report names.
    if (this.jsonEnabled()) return unit.path === undefined ? unit : report;
    if (unit.path === undefined) {
      process.stdout.write(text);
      return report;
    }
    this.log(`wrote ${unit.path}`);
    this.log(`ExecStart=${unit.execStart}`);
    if (!unit.configExists) this.log(`note: ${unit.configChecked} does not exist yet: llmgw agent example-config --output ${unit.configChecked}`);
    if (unit.rootEngines.length > 0) {
      const keys = unit.rootEngines.map((e) => `engines.${e}.user`).join(', ');
      this.log(
        `note: ${keys} ${unit.rootEngines.length === 1 ? 'is' : 'are'} empty in ${unit.configChecked}: the agent runs as root and refuses to start ${unit.rootEngines.length === 1 ? 'that engine' : 'those engines'} as root; ` +
          `create their account (useradd --system --create-home --home-dir /var/lib/llmgw-engine --shell /usr/sbin/nologin llmgw-engine) and set ${unit.rootEngines.length === 1 ? 'it' : 'each'} to llmgw-engine`,
      );
    }
    if (flags.root === undefined && flags.output === undefined) this.log('next: systemctl daemon-reload && systemctl enable --now llmgw-agent');
    return report;
  }
}
