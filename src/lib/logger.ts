import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger } from 'pino';

export { LOG_LEVELS } from './log-levels.js';
export const DEFAULT_LOG_LEVEL = 'info';

export interface LoggerOptions {
  level?: LevelWithSilent;
  /** Human-readable lines; the default is to pretty-print when stderr is a TTY. */
  pretty?: boolean;
  name?: string;
  /** Append JSON lines to this file instead of writing to stderr (`llmgw dev up` keeps stderr for its progress). */
  file?: string;
}

/**
 * Structured logs go to stderr: JSON when stderr is not a terminal (journald
 * keeps the fields), readable lines when a person is watching. stdout is left
 * for command output only.
 */
export async function createLogger(options: LoggerOptions = {}): Promise<Logger> {
  const level = options.level ?? DEFAULT_LOG_LEVEL;
  const pretty = options.pretty ?? process.stderr.isTTY === true;
  const base = options.name ? { name: options.name } : {};
  if (options.file !== undefined) {
    return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: options.file, sync: true, append: true, mkdir: true }));
  }
  if (pretty) {
    // Loaded only for a terminal, so that start-up under systemd does not pay for it.
    const { default: pinoPretty } = await import('pino-pretty');
    const stream = pinoPretty({ destination: 2, sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' });
    return pino({ level, base }, stream);
  }
  // Synchronous writes: a log line written just before the process exits is
  // the one an operator needs most.
  return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: 2, sync: true }));
}

/** A logger that drops everything, for library calls made without one. */
export const silentLogger: Logger = pino({ level: 'silent' });
