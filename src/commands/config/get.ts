import { Args } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { preferenceSpec } from '../../cli/cli-preferences.js';
import type { PreferenceEntry } from '../../cli/list-preferences.js';

export default class ConfigGet extends BaseCommand {
  static override summary = 'Print the value a CLI preference has now (without flags), and where it came from.';

  static override description = `The value the command would use with no flag given: from the environment
(LLMGW_SOCKET, LLMGW_CONFIG, ...), else from \`llmgw config set\`, else (for
ctl.socket) the agent config's admin.socket, else its default, and which of
these it came from. A stored value that ctl would refuse
is printed with its problem on stderr. --json prints {key, value, source, doc}.`;

  static override examples = ['<%= config.bin %> config get ctl.socket', '<%= config.bin %> config get output.json --json'];

  static override args = {
    key: Args.string({ description: 'Preference key (see `llmgw config list`).', required: true }),
  };

  async run(): Promise<PreferenceEntry> {
    const { args } = await this.parse(ConfigGet);
    const spec = preferenceSpec(args.key);
    const { listPreferences } = await import('../../cli/list-preferences.js');
    const entry = (await listPreferences()).preferences.find((p) => p.key === spec.key) as PreferenceEntry;
    this.log(`${String(entry.value)}  (${entry.source})`);
    // Flagged on stderr, so that `$(llmgw config get …)` still captures the value alone.
    if (entry.problem) this.logToStderr(`⚠ ${entry.problem}`);
    return entry;
  }
}
