import { nearestName } from '../lib/nearest-name.js';

/**
 * The one line for a command that does not exist, in the style of every
 * other llmgw error (oclif's own is a boxed "command ctl:stauts not found",
 * with its internal ":" separator and no suggestion). `id` is oclif's
 * colon-separated id; `known` the ids of every command.
 */
export function commandNotFoundMessage(id: string, known: readonly string[]): string {
  const spoken = id.replaceAll(':', ' ');
  const near = nearestName(spoken, known.map((k) => k.replaceAll(':', ' ')));
  const hint = near ? `did you mean \`llmgw ${near}\`?` : '`llmgw --help` lists the commands';
  return `unknown command \`llmgw ${spoken}\`; ${hint}`;
}
