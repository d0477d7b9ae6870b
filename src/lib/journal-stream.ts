import { fstatSync } from 'node:fs';

/**
 * Whether file descriptor `fd` (stderr by default) is the journal's stream.
 *
 * systemd.exec(5), "Environment Variables Set or Propagated by the Service
 * Manager", $JOURNAL_STREAM: set when a unit's stdout or stderr is connected
 * to the journal (StandardError=journal, the default), as
 * "<device>:<inode>" of that stream, so that a process can tell by
 * comparing it with fstat() of its own descriptor. The variable alone is not
 * enough: it is inherited, and `llmgw agent run 2>file` started from a unit's
 * shell would otherwise prefix lines that no journald will ever read.
 */
export function isJournalStream(fd = 2, env: NodeJS.ProcessEnv = process.env): boolean {
  const want = env.JOURNAL_STREAM;
  if (!want) return false;
  try {
    const st = fstatSync(fd, { bigint: true });
    return want === `${st.dev}:${st.ino}`;
  } catch {
    // A closed descriptor is no journal.
    return false;
  }
}

/**
 * The sd-daemon(3) prefix of a line at pino level `level`, which journald
 * turns into the record's PRIORITY (SyslogLevelPrefix=, yes by default):
 * fatal <2> (SD_CRIT), error <3> (SD_ERR), warn <4> (SD_WARNING), info <6>
 * (SD_INFO), debug and trace <7> (SD_DEBUG). Without it every line is
 * PRIORITY 6 and `journalctl -p warning` shows none of the agent's warnings.
 */
export function syslogPrefix(level: number): string {
  if (level >= 60) return '<2>';
  if (level >= 50) return '<3>';
  if (level >= 40) return '<4>';
  if (level >= 30) return '<6>';
  return '<7>';
}
