/**
 * One error type for every expected failure, with a kind that maps to the
 * process exit status. An operator sees the message, one line, never a stack.
 */

/** Exit statuses, as DESIGN.md fixes them (78 is systemd's "do not restart"). */
export const ExitCode = {
  success: 0,
  failure: 1,
  usage: 2,
  unreachable: 69,
  permission: 77,
  config: 78,
} as const;

export type ErrorKind = Exclude<keyof typeof ExitCode, 'success'>;

export interface LlmgwErrorOptions {
  cause?: unknown;
  /**
   * What a script needs beside the message, added to the `--json` error
   * report (e.g. a drain's last progress when it timed out); never shown to
   * a human, whose one line must say it all.
   */
  details?: Readonly<Record<string, unknown>>;
}

export class LlmgwError extends Error {
  override readonly name = 'LlmgwError';
  readonly kind: ErrorKind;
  readonly details?: Readonly<Record<string, unknown>>;

  /**
   * @param message lowercase; says what failed and what to do about it.
   */
  constructor(kind: ErrorKind, message: string, options?: LlmgwErrorOptions) {
    super(message, options);
    this.kind = kind;
    this.details = options?.details;
  }

  get exitCode(): number {
    return ExitCode[this.kind];
  }
}

export const configError = (message: string, options?: { cause?: unknown }) =>
  new LlmgwError('config', message, options);

export const usageError = (message: string) => new LlmgwError('usage', message);

export const failure = (message: string, options?: LlmgwErrorOptions) =>
  new LlmgwError('failure', message, options);

/** @deprecated import from './errno.js'; kept while callers move. */
export { errnoCode } from './errno.js';

/** The message of anything thrown, for logs and one-line reports. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
