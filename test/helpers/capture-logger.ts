import { type Logger, pino } from 'pino';

/** A real pino logger whose records a test can read: what the code under test logged is what it did. */
export function captureLogger(level: 'debug' | 'info' = 'debug'): { logger: Logger; records: Record<string, unknown>[] } {
  const records: Record<string, unknown>[] = [];
  const logger = pino({ level }, { write: (line: string) => void records.push(JSON.parse(line) as Record<string, unknown>) });
  return { logger, records };
}

/** Control messages of `kind` ('start', 'stop', …) a ControlPlane logged as sent. */
export function sentCommands(records: Record<string, unknown>[], kind: string): Record<string, unknown>[] {
  return records.filter((r) => r.msg === 'sent control message' && r.kind === kind);
}
