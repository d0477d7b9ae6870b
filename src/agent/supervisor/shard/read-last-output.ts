import { tailFile } from '../../../lib/files/tail-file.js';

/** Log lines kept in lastOutput when a shard fails or exits. */
export const LAST_OUTPUT_LINES = 20;

/** The engine's last words from its log, for a failure report; [] when the log cannot be read (a report without them beats none). */
export function readLastOutput(logPath: string): Promise<string[]> {
  return tailFile(logPath, LAST_OUTPUT_LINES).catch(() => []);
}
