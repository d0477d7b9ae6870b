import { pino, type DestinationStream, type Logger, type LevelWithSilent, type LoggerOptions as PinoOptions } from 'pino';
import { isJournalStream, syslogPrefix } from './journal-stream.js';

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
 * Levels by name ("level":"warn"), not pino's numbers: what an operator
 * greps for and what `jq 'select(.level=="error")'` reads without a table.
 */
const LEVEL_NAMES: PinoOptions['formatters'] = { level: (label) => ({ level: label }) };

/**
 * Structured logs go to stderr: JSON when stderr is not a terminal (journald
 * keeps the fields), readable lines when a person is watching. stdout is left
 * for command output only. When stderr is the journal's stream, each line
 * starts with its syslog priority (journalLines).
 */
export async function createLogger(options: LoggerOptions = {}): Promise<Logger> {
  const level = options.level ?? DEFAULT_LOG_LEVEL;
  const pretty = options.pretty ?? process.stderr.isTTY === true;
  const base = options.name ? { name: options.name } : {};
  if (options.file !== undefined) {
    return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime, formatters: LEVEL_NAMES }, pino.destination({ dest: options.file, sync: true, append: true, mkdir: true }));
  }
  if (pretty) {
    // Loaded only for a terminal, so that start-up under systemd does not pay for it.
    const { default: pinoPretty } = await import('pino-pretty');
    const stream = pinoPretty({ destination: 2, sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' });
    return pino({ level, base }, stream);
  }
  // Synchronous writes: a log line written just before the process exits is
  // the one an operator needs most.
  const stderr = pino.destination({ dest: 2, sync: true });
  const dest = isJournalStream(2) ? journalLines(stderr) : stderr;
  return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime, formatters: LEVEL_NAMES }, dest);
}

/**
 * `dest` with each line prefixed by its sd-daemon(3) priority, "<4>{...}",
 * which journald strips and files as the record's PRIORITY. pino tells a
 * stream that asks for it (the pino.metadata symbol, as its multistream
 * does) the level of the line it is about to write.
 */
function journalLines(dest: DestinationStream): DestinationStream {
  const stream = {
    [pino.symbols.needsMetadataGsym]: true,
    lastLevel: 30,
    write(line: string): void {
      dest.write(syslogPrefix(stream.lastLevel) + line);
    },
  };
  return stream;
}

/** A logger that drops everything, for library calls made without one. */
export const silentLogger: Logger = pino({ level: 'silent' });
