import { Command, Errors, Flags, type Interfaces } from '@oclif/core';
import { ExitCode } from '../lib/errors.js';
import { LOG_LEVELS } from '../lib/log-levels.js';
import { type ErrorReport, errorReport } from './error-report.js';

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

  override async catch(err: Error & { oclif?: { exit?: number } }): Promise<never> {
    if (err instanceof Errors.ExitError) throw err;
    // Flag and argument parsing errors from oclif are usage errors; the rest
    // are reported as they are without oclif (bin/run.js's fast paths).
    const report: ErrorReport =
      err instanceof Errors.CLIError && err.oclif?.exit === ExitCode.usage
        ? { kind: 'usage', message: err.message, exitCode: ExitCode.usage }
        : errorReport(err);
    if (this.jsonEnabled()) this.logJson({ error: report });
    process.stderr.write(`error: ${report.message}\n`);
    return this.exit(report.exitCode);
  }
}

export type InferredFlags<T extends typeof Command> = Interfaces.InferredFlags<T['flags'] & T['baseFlags']>;
