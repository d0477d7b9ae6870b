import { runCtlStatus } from '../ctl/run-ctl-status.js';
import { LOG_LEVELS } from '../lib/log-levels.js';
import { prefersJson, readPreferences, storedCtlPaths } from './cli-preferences.js';
import { errorLine, errorReport } from './error-report.js';

/**
 * `llmgw ctl status` without loading oclif, which is about a third of the
 * command's cold start; operators and monitoring scripts run it most. `args`
 * is the command line after `ctl status`. Only the plain forms are answered
 * here (then it returns true); for anything else it does nothing and returns
 * false, and bin/run.js hands the command line to oclif. Output and exit
 * status are the oclif command's: the same runCtlStatus and errorReport,
 * printed as oclif prints them.
 *
 * Nothing here may import @oclif/core, even indirectly (ctl-flags.ts and
 * base-command.ts do): that would undo the point.
 */
export async function fastCtlStatus(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  const plain = plainInvocation(args, env);
  if (!plain) return false;
  // As BaseCommand does: --json, else LLMGW_JSON, else the stored output.json.
  let json = plain.json;
  try {
    const stored = readPreferences(env);
    json ||= prefersJson(stored, env);
    // chalk is loaded only for the human form; --json never needs it.
    if (!json) (await import('./apply-color-preference.js')).applyColorPreference(stored, env);
    const { status, text } = await runCtlStatus({ socket: plain.socket, configPath: plain.configPath, stored: storedCtlPaths(stored) }, json);
    process.stdout.write(text === undefined ? prettyJson(status) : `${text}\n`);
  } catch (err) {
    const report = errorReport(err, env);
    if (json) process.stdout.write(prettyJson({ error: report }));
    process.stderr.write(errorLine(report, env));
    // Not process.exit(), which can cut off output still queued for a pipe.
    process.exitCode = report.exitCode;
  }
  return true;
}

interface PlainInvocation {
  json: boolean;
  /** --socket, else a non-empty LLMGW_SOCKET, as the oclif flag reads it (ctl-flags.ts). */
  socket?: string;
  /** --config, else a non-empty LLMGW_CONFIG. */
  configPath?: string;
}

/**
 * The invocation when it is made only of `--json`, `--socket X|=X` and
 * `--config X|=X`, each at most once and with a value. Anything else (help,
 * --log-level, an argument, a flag oclif would refuse) is left to oclif,
 * whose help and usage errors are not worth copying; so is an environment
 * oclif reads differently: LLMGW_CONTENT_TYPE (its switch to JSON output), a
 * LLMGW_LOG_LEVEL it would reject, an empty LLMGW_SOCKET or LLMGW_CONFIG.
 */
function plainInvocation(args: readonly string[], env: NodeJS.ProcessEnv): PlainInvocation | undefined {
  if (env.LLMGW_CONTENT_TYPE !== undefined || env.LLMGW_SOCKET === '' || env.LLMGW_CONFIG === '') return undefined;
  if (env.LLMGW_LOG_LEVEL !== undefined && !(LOG_LEVELS as readonly string[]).includes(env.LLMGW_LOG_LEVEL)) return undefined;
  const given = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    let value = '';
    if (name === '--socket' || name === '--config') {
      value = (eq === -1 ? args[++i] : arg.slice(eq + 1)) ?? '';
      // oclif refuses a missing value or reads an empty one as none, and takes
      // a separate value that starts with "-" for the next flag.
      if (value === '' || (eq === -1 && value.startsWith('-'))) return undefined;
    } else if (arg !== '--json') {
      return undefined;
    }
    if (given.has(name)) return undefined;
    given.set(name, value);
  }
  return { json: given.has('--json'), socket: given.get('--socket') ?? env.LLMGW_SOCKET, configPath: given.get('--config') ?? env.LLMGW_CONFIG };
}

/** As oclif's logJson prints without a theme: JSON indented by two spaces, and a newline. */
const prettyJson = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
