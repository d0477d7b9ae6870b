import { Args } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { preferenceSpec } from '../../cli/cli-preferences.js';

export default class ConfigUnset extends BaseCommand {
  static override summary = 'Remove a stored CLI preference; its default (or the environment) applies again.';

  static override description = `Removes the key from the preferences file ($XDG_CONFIG_HOME/llmgw); unsetting
a key that is not set is no error. It works on a file with a bad value in it,
which is how such a file is repaired. --json prints {key, removed}.`;

  static override examples = ['<%= config.bin %> config unset ctl.socket'];

  // Must work on a preferences file with a bad value in it: it is how that file is repaired.
  static override honoursPreferences = false;

  static override args = {
    key: Args.string({ description: 'Preference key (see `llmgw config list`).', required: true }),
  };

  async run(): Promise<{ key: string; removed: boolean }> {
    const { args } = await this.parse(ConfigUnset);
    const spec = preferenceSpec(args.key);
    const { unsetPreference } = await import('../../cli/preference-store.js');
    const removed = await unsetPreference(spec.key);
    this.log(removed ? `${spec.key} unset` : `${spec.key} was not set`);
    return { key: spec.key, removed };
  }
}
