import { Command, Errors, Flags, type Interfaces } from '@oclif/core';
import { ExitCode, LlmgwError } from '../lib/errors.js';
import { LOG_LEVELS } from '../lib/log-levels.js';

/**
 * The base of every llmgw command: `--json` (oclif's, printed from the
 * returned value), `--log-level`, and the one place where an error becomes an
 * exit status and a single line on stderr.
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
    let exitCode: number;
    let kind: string;
    let message = err.message;
    if (err instanceof LlmgwError) {
      exitCode = err.exitCode;
      kind = err.kind;
    } else if (err instanceof Errors.ExitError) {
      throw err;
    } else if (err instanceof Errors.CLIError && err.oclif?.exit === ExitCode.usage) {
      // Flag and argument parsing errors from oclif.
      exitCode = ExitCode.usage;
      kind = 'usage';
    } else {
      exitCode = ExitCode.failure;
      kind = 'failure';
      // Unexpected: the stack helps a developer, and only with LLMGW_DEBUG.
      if (process.env.LLMGW_DEBUG) message = err.stack ?? message;
    }
    if (this.jsonEnabled()) this.logJson({ error: { kind, message, exitCode } });
    process.stderr.write(`error: ${message}\n`);
    return this.exit(exitCode);
  }
}

export type InferredFlags<T extends typeof Command> = Interfaces.InferredFlags<T['flags'] & T['baseFlags']>;
