import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keepPreviousRun } from '../../../src/lib/files/keep-previous-run.js';
import { previousRunFailurePath, previousRunLogPath, shardFailurePath, shardLogDir, shardLogPath } from '../../../src/lib/shard-layout.js';

let logDir: string;
beforeEach(() => {
  logDir = mkdtempSync(join(tmpdir(), 'llmgw-keep-'));
  mkdirSync(shardLogDir(logDir));
});
afterEach(() => rmSync(logDir, { recursive: true, force: true }));

/** One run of shard `id`: its log, and a failure record when it failed. */
function run(id: string, n: number, failed: boolean): void {
  writeFileSync(shardLogPath(logDir, id), `run ${n}\n`);
  if (failed) writeFileSync(shardFailurePath(logDir, id), JSON.stringify({ run: n }));
}

describe('keepPreviousRun', () => {
  it('moves the last run to previous-runs/<id>.1 and keeps at most `keep` runs, newest first', async () => {
    for (let n = 1; n <= 4; n++) {
      await keepPreviousRun(logDir, 's', 2);
      run('s', n, n % 2 === 1);
    }
    await keepPreviousRun(logDir, 's', 2);
    expect(readFileSync(previousRunLogPath(logDir, 's', 1), 'utf8')).toBe('run 4\n');
    expect(readFileSync(previousRunLogPath(logDir, 's', 2), 'utf8')).toBe('run 3\n');
    // Run 4 did not fail: no record of run 3's may pass for it.
    expect(existsSync(previousRunFailurePath(logDir, 's', 1))).toBe(false);
    expect(JSON.parse(readFileSync(previousRunFailurePath(logDir, 's', 2), 'utf8'))).toEqual({ run: 3 });
    expect(readdirSync(join(logDir, 'previous-runs')).sort()).toEqual(['s.1.log', 's.2.failure.json', 's.2.log']);
    expect(existsSync(shardLogPath(logDir, 's'))).toBe(false);
  });

  it('never mixes up shard ids that differ by a dotted number', async () => {
    run('a', 1, false);
    run('a.1', 1, false);
    writeFileSync(shardLogPath(logDir, 'a.1'), 'the other shard\n');
    await keepPreviousRun(logDir, 'a', 3);
    await keepPreviousRun(logDir, 'a.1', 3);
    expect(readFileSync(previousRunLogPath(logDir, 'a', 1), 'utf8')).toBe('run 1\n');
    expect(readFileSync(previousRunLogPath(logDir, 'a.1', 1), 'utf8')).toBe('the other shard\n');
  });

  it('keeps nothing for an empty or missing log, or with keep 0', async () => {
    expect(await keepPreviousRun(logDir, 's', 3)).toBe(false);
    writeFileSync(shardLogPath(logDir, 's'), '');
    expect(await keepPreviousRun(logDir, 's', 3)).toBe(false);
    run('s', 1, true);
    expect(await keepPreviousRun(logDir, 's', 0)).toBe(false);
    expect(readFileSync(shardLogPath(logDir, 's'), 'utf8')).toBe('run 1\n');
    expect(existsSync(join(logDir, 'previous-runs'))).toBe(false);
  });
});
