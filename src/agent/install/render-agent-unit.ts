import { isAbsolute } from 'node:path';
import { failure, usageError } from '../../lib/errors.js';

export interface AgentUnitPaths {
  /** The node executable that runs the agent (this installation's: process.execPath). */
  nodePath: string;
  /** The package's bin/run.js. */
  binPath: string;
  /** The agent configuration the unit passes as --config. */
  configPath: string;
}

/**
 * Characters a path may hold to stand in ExecStart= as one word, unquoted: systemd splits on
 * whitespace and expands `%` specifiers and `$` variables, so a path holding any of them would run
 * something other than what was written.
 */
const UNIT_SAFE_PATH = /^\/[A-Za-z0-9/._+@:=,-]*$/;

export const INSTALLED_UNIT_NOTE =
  '# Written by `llmgw agent install-unit` with this installation\'s absolute paths; run it again\n# after moving or upgrading Node (a unit naming a node that is gone fails with 203/EXEC).\n';

/**
 * The packaged unit with ExecStart= naming this installation's node and bin/run.js by absolute
 * path. Not the `llmgw` symlink: where npm puts it depends on its prefix (/usr/bin with a
 * distribution's Node, /usr/local/bin otherwise), and its `#!/usr/bin/env node` finds no node under
 * systemd's PATH when Node came from nvm.
 */
export function renderAgentUnit(template: string, paths: AgentUnitPaths): string {
  // A bad --config is the caller's argument (usage); a bad node or package path is where this
  // installation lives, which only reinstalling elsewhere fixes.
  for (const [what, p, err] of [
    ['--config', paths.configPath, usageError],
    ['node executable', paths.nodePath, failure],
    ['llmgw entry point', paths.binPath, failure],
  ] as const) {
    if (!isAbsolute(p)) throw err(`${what} ${p} is not an absolute path: systemd starts the unit in /, pass an absolute one`);
    if (!UNIT_SAFE_PATH.test(p)) {
      throw err(`${what} ${JSON.stringify(p)} holds a character systemd would split or expand (space, quote, %, $, \\): use a path of letters, digits and /._-+@:=,`);
    }
  }
  const lines = template.split('\n');
  const at = lines.flatMap((l, i) => (l.startsWith('ExecStart=') ? [i] : []));
  if (at.length !== 1) throw failure(`the unit template has ${at.length} ExecStart= lines, expected 1: reinstall the llmgw package`);
  lines[at[0] as number] = `ExecStart=${paths.nodePath} ${paths.binPath} agent run --config ${paths.configPath}`;
  return INSTALLED_UNIT_NOTE + lines.join('\n');
}
