import { Args } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { parsePreference, preferenceSpec, PREFERENCE_KEYS } from '../../cli/cli-preferences.js';

export default class ConfigSet extends BaseCommand {
  static override summary = "Store a CLI preference (this user's, not the agent's configuration).";

  static override description = `Preferences live in $XDG_CONFIG_HOME/llmgw/config.json (~/.config/llmgw).
Nothing is stored unless you set it. A flag beats its environment variable,
which beats the stored preference, which beats the agent config's
admin.socket, which beats the default. Keys:
${PREFERENCE_KEYS.map((k) => `  ${k.key} (${k.accepts}; env ${k.env}): ${k.doc}`).join('\n')}`;

  static override examples = [
    '# a second agent on this machine, e.g. under `llmgw dev control-plane`',
    '<%= config.bin %> config set ctl.socket /tmp/agent-b/agent.sock',
    '<%= config.bin %> config set output.json true',
    '<%= config.bin %> config set color never',
  ];

  // Must work on a preferences file with a bad value in it: it is how that file is repaired.
  static override honoursPreferences = false;

  static override args = {
    key: Args.string({ description: 'Preference key (see `llmgw config list`).', required: true }),
    value: Args.string({ description: 'Its value.', required: true }),
  };

  async run(): Promise<{ key: string; value: string | boolean; file: string }> {
    const { args } = await this.parse(ConfigSet);
    const spec = preferenceSpec(args.key);
    const value = parsePreference(spec, args.value);
    if (spec.key === 'ctl.config') {
      // Refused now rather than found by every later ctl command (walkthrough 2, row 9).
      const { requireReadable } = await import('../../ctl/resolve-ctl-paths.js');
      requireReadable(
        value as string,
        `write it first (\`llmgw agent example-config --output ${value as string}\`) or give the path of the agent's config; nothing was stored`,
      );
    }
    const { setPreference } = await import('../../cli/preference-store.js');
    const file = await setPreference(spec.key, value);
    this.log(`${spec.key} = ${String(value)} (${file})`);
    return { key: spec.key, value, file };
  }
}
