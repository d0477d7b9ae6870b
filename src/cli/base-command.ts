import { Command, Errors, Flags, type Interfaces } from '@oclif/core';
import { ExitCode } from '../lib/errors.js';
import { LOG_LEVELS } from '../lib/log-levels.js';
import { applyColorPreference } from './apply-color-preference.js';
import { type Preferences, prefersJson, readPreferences } from './cli-preferences.js';
import { type ErrorReport, errorLine, errorReport } from './error-report.js';

/**
 * The base of every llmgw command: `--json` (oclif's, printed from the
 * returned value), `--log-level`, and where an error becomes an exit status
 * and a single line on stderr (see errorReport).
 */
export abstract class BaseCommand extends Command {
  static override enableJsonFlag = true;

  static override baseFlags = {
    'log-level': Flags.option({
      options: LOG_LEVELS,
      summary: 'Least severe log level written to stderr.',
      helpGroup: 'GLOBAL',
      env: 'LLMGW_LOG_LEVEL',
    })(),
  };

  /**
   * Whether the operator's stored preferences (`llmgw config`: output.json,
   * color) apply. Off for what systemd or the agent runs (`agent run`,
   * `sim engine`): a preference an operator set for their own terminal must
   * not change a service's output.
   */
  static honoursPreferences = true;

  /** The operator's stored preferences, read once in init; empty for commands that do not honour them. */
  protected preferences: Preferences = {};

  private preferredJson = false;

  override async init(): Promise<void> {
    await super.init();
    if (!(this.ctor as typeof BaseCommand).honoursPreferences) return;
    // A broken preferences file is reported (exit 78, naming it), not skipped.
    this.preferences = readPreferences();
    this.preferredJson = prefersJson(this.preferences);
    applyColorPreference(this.preferences);
  }

  override jsonEnabled(): boolean {
    return super.jsonEnabled() || (Boolean(this.ctor.enableJsonFlag) && this.preferredJson);
  }

  override async catch(err: Error & { oclif?: { exit?: number } }): Promise<never> {
    if (err instanceof Errors.ExitError) throw err;
    // Flag and argument parsing errors from oclif are usage errors; the rest
    // are reported as they are without oclif (bin/run.js's fast paths).
    const fromOclif = err instanceof Errors.CLIError && err.oclif?.exit === ExitCode.usage;
    const report: ErrorReport = fromOclif ? { kind: 'usage', message: err.message, exitCode: ExitCode.usage } : errorReport(err);
    const unwrapped = withoutParsingWrapper(report.message);
    // A flag parser's message is ours and may quote another party; oclif's own is the CLI's text.
    const ownText = fromOclif && unwrapped === report.message;
    report.message = ownText ? oneLineUsage(unwrapped, this.config.bin, this.id) : unwrapped;
    if (this.jsonEnabled()) this.logJson({ error: report });
    process.stderr.write(errorLine(report, process.env, { ownText }));
    return this.exit(report.exitCode);
  }
}

/**
 * oclif wraps what a flag's parser threw in "Parsing --x \n\t…\nSee more help
 * with --help": three lines where llmgw promises one, and our parsers already
 * name the flag.
 */
function withoutParsingWrapper(message: string): string {
  const m = /^Parsing (--\S+) \n\t([\s\S]*)\nSee more help with --help$/.exec(message);
  if (!m) return message;
  const [, flag, inner] = m as unknown as [string, string, string];
  // oclif's own integer checks ("Expected an integer … but received: 0") do not say which flag.
  return inner.includes(flag) ? inner : `${flag}: ${inner}`;
}

/**
 * oclif's own usage messages on one line, as every llmgw error is: "Missing 1
 * required arg:\nshard  The shard …\nSee more help with --help" was three
 * lines, "Nonexistent flag: --x\nSee more help with --help" two, and a
 * script's `2>&1 | tail -1` or a log line kept only the last, which named
 * nothing. The help line becomes the command's own `--help`.
 */
export function oneLineUsage(message: string, bin: string, id: string | undefined): string {
  // An argument's line is "name  Description.": "name, description".
  const lines = message.split('\n').map((l) => l.trim().replace(/^(\S+)\s{2,}(\S)(.*?)\.?$/, (_m, name: string, first: string, tail: string) => `${name}, ${first.toLowerCase()}${tail}`));
  const help = lines.at(-1) === 'See more help with --help';
  const body = (help ? lines.slice(0, -1) : lines).filter((l) => l !== '' && l !== 'The following error occurred:');
  if (body.length === 0) return message;
  const [head, ...rest] = body as [string, ...string[]];
  const text = rest.length === 0 ? head : `${head}${head.endsWith(':') ? ' ' : '; '}${rest.join('; ')}`;
  const command = id ? `${bin} ${id.replaceAll(':', ' ')}` : bin;
  return help ? `${text}; see \`${command} --help\`` : text;
}

export type InferredFlags<T extends typeof Command> = Interfaces.InferredFlags<T['flags'] & T['baseFlags']>;
