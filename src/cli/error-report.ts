import { ExitCode, type ErrorKind, LlmgwError } from '../lib/errors.js';
import { isJournalStream, syslogPrefix } from '../lib/journal-stream.js';
import { printable } from '../lib/printable.js';

/** What an operator is told about a failed command: `error: <message>` on stderr, and with --json this object on stdout. */
export interface ErrorReport {
  kind: ErrorKind;
  message: string;
  exitCode: number;
  /** LlmgwError's details, for scripts (see LlmgwErrorOptions). */
  [detail: string]: unknown;
}

/**
 * The report for an error that ended a command: an LlmgwError says its own
 * kind and exit status; anything else is unexpected, exit 1, with its stack
 * only under LLMGW_DEBUG (an operator gets one line, a developer the trace).
 * Free of oclif, so that a command answered without loading oclif reports
 * errors exactly as BaseCommand does.
 */
export function errorReport(err: unknown, env: NodeJS.ProcessEnv = process.env): ErrorReport {
  if (err instanceof LlmgwError) return { ...err.details, kind: err.kind, message: err.message, exitCode: err.exitCode };
  const message = err instanceof Error ? ((env.LLMGW_DEBUG && err.stack) || err.message) : String(err);
  return { kind: 'failure', message, exitCode: ExitCode.failure };
}

/**
 * The `error: …` line for stderr. Messages can carry another party's text
 * (an engine's error, a control plane's replica id): control characters are
 * shown escaped, not emitted (printable.ts). Under LLMGW_DEBUG the stack is
 * printed as it is, lines and all.
 */
export function errorLine(report: ErrorReport, env: NodeJS.ProcessEnv = process.env, opts: { ownText?: boolean; journal?: boolean } = {}): string {
  // Into the journal as the agent's own lines go: JSON at priority err (walkthrough 3, item 3). As plain text
  // at the stream's default priority 6, `journalctl -p warning` hid why the agent was down and
  // `journalctl -o cat | jq` stopped at it.
  if (opts.journal ?? isJournalStream(2, env)) {
    const { message, ...rest } = report;
    return `${syslogPrefix(50)}${JSON.stringify({ level: 'error', time: new Date().toISOString(), name: 'llmgw', msg: message, ...rest })}\n`;
  }
  if (env.LLMGW_DEBUG) return `error: ${report.message}\n`;
  // oclif's own parsing messages ("Missing 1 required arg:\nshard  …\nSee more help with --help") are
  // the CLI's text, laid out in lines: escaping their line breaks printed \x0a where they were
  // (new-operator walkthrough 2, row 15). Each line is still made printable: it quotes what was typed.
  if (opts.ownText) return `error: ${report.message.split('\n').map(printable).join('\n')}\n`;
  return `error: ${printable(report.message)}\n`;
}
