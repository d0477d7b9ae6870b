import { ExitCode, type ErrorKind, LlmgwError } from '../lib/errors.js';

/** What an operator is told about a failed command: `error: <message>` on stderr, and with --json this object on stdout. */
export interface ErrorReport {
  kind: ErrorKind;
  message: string;
  exitCode: number;
}

/**
 * The report for an error that ended a command: an LlmgwError says its own
 * kind and exit status; anything else is unexpected, exit 1, with its stack
 * only under LLMGW_DEBUG (an operator gets one line, a developer the trace).
 * Free of oclif, so that a command answered without loading oclif reports
 * errors exactly as BaseCommand does.
 */
export function errorReport(err: unknown, env: NodeJS.ProcessEnv = process.env): ErrorReport {
  if (err instanceof LlmgwError) return { kind: err.kind, message: err.message, exitCode: err.exitCode };
  const message = err instanceof Error ? ((env.LLMGW_DEBUG && err.stack) || err.message) : String(err);
  return { kind: 'failure', message, exitCode: ExitCode.failure };
}
