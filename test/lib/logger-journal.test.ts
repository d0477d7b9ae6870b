import { execFileSync } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/run-cli.js';

/*
 * The agent's logger in a real process whose stderr is a file: with
 * JOURNAL_STREAM naming that very file (as systemd names the journal's
 * stream) each line carries its syslog priority; otherwise plain JSON lines.
 * Both with level names, not pino's numbers.
 */

const LOGGER = join(REPO_ROOT, 'src/lib/logger.ts');
const script = `
const { createLogger } = await import(${JSON.stringify(LOGGER)});
const log = await createLogger({ level: 'debug', pretty: false, name: 'llmgw-agent' });
log.debug('a debug line');
log.info({ shard: 's1' }, 'an info line');
log.warn('a warning');
log.error({ err: 'boom' }, 'an error');
log.fatal('a fatal line');
`;

/** Every folder logLines made: a test that calls it twice left the first one in /tmp. */
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Runs the script with stderr appended to a file; `journal` 'match' sets JOURNAL_STREAM to that file's dev:ino, 'other' to another file's. */
function logLines(journal: 'match' | 'other' | 'unset'): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-logger-'));
  dirs.push(dir);
  const file = join(dir, 'stderr');
  const other = join(dir, 'other');
  closeSync(openSync(other, 'w'));
  const fd = openSync(file, 'w');
  const target = statSync(journal === 'other' ? other : file, { bigint: true });
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.JOURNAL_STREAM;
  if (journal !== 'unset') env.JOURNAL_STREAM = `${target.dev}:${target.ino}`;
  try {
    execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT, env, stdio: ['ignore', 'ignore', fd] });
  } finally {
    closeSync(fd);
  }
  return readFileSync(file, 'utf8').trimEnd().split('\n');
}

describe('the agent logger', () => {
  it('prefixes each line with its sd-daemon priority when stderr is the journal stream', () => {
    const lines = logLines('match');
    expect(lines.map((l) => l.slice(0, 3))).toEqual(['<7>', '<6>', '<4>', '<3>', '<2>']);
    const records = lines.map((l) => JSON.parse(l.slice(3)) as Record<string, unknown>);
    expect(records.map((r) => r.level)).toEqual(['debug', 'info', 'warn', 'error', 'fatal']);
    expect(records[1]).toMatchObject({ msg: 'an info line', shard: 's1', name: 'llmgw-agent' });
  });

  it('writes plain JSON with level names when JOURNAL_STREAM names another stream, or none', () => {
    for (const journal of ['other', 'unset'] as const) {
      const lines = logLines(journal);
      expect(lines.every((l) => l.startsWith('{'))).toBe(true);
      expect(lines.map((l) => (JSON.parse(l) as { level: unknown }).level)).toEqual(['debug', 'info', 'warn', 'error', 'fatal']);
    }
  });
});
