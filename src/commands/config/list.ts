import { BaseCommand } from '../../cli/base-command.js';
import type { PreferenceList } from '../../cli/list-preferences.js';

export default class ConfigList extends BaseCommand {
  static override summary = 'Show every CLI preference: the value commands use without a flag, and its source.';

  static override description = `Sources: env <NAME> (the environment), llmgw config (<file>) (set with
\`llmgw config set\`), admin.socket in <agent config> (ctl.socket only), default.`;

  static override examples = ['<%= config.bin %> config list', '<%= config.bin %> config list --json | jq -r \'.preferences[] | select(.key == "ctl.socket") | .source\''];

  async run(): Promise<PreferenceList> {
    await this.parse(ConfigList);
    const { listPreferences } = await import('../../cli/list-preferences.js');
    const { renderTable } = await import('../../lib/table.js');
    const { printable } = await import('../../lib/printable.js');
    const list = await listPreferences();
    this.log(`preferences file: ${list.file}\n`);
    this.log(renderTable(['KEY', 'VALUE', 'SOURCE'], list.preferences.map((p) => [p.key, printable(String(p.value)) + (p.problem ? ' ⚠' : ''), printable(p.source)])));
    // Flagged, not fatal: this is the command that finds a bad stored value (walkthrough 2, row 9).
    const problems = list.preferences.filter((p) => p.problem);
    for (const p of problems) {
      // ctl.socket's problem quotes ctl.config's when that is its cause: say it once.
      const quoted = problems.find((q) => q !== p && p.problem?.includes(q.problem as string));
      this.log(`\n⚠ ${p.key}: ${quoted ? `ctl refuses it until ${quoted.key} is fixed` : printable(p.problem as string)}`);
    }
    return list;
  }
}
