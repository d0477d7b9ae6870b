import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { followFile } from '../../../src/lib/files/follow-file.js';
import { rotateLogIfNeeded } from '../../../src/lib/files/rotate-log.js';
import { tailFile } from '../../../src/lib/files/tail-file.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-rotate-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('rotateLogIfNeeded', () => {
  it('keeps the old generation 0640 with the log group, and truncates the log in place', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, 'x'.repeat(2000), { mode: 0o640 });
    chownSync(log, 0, 100);
    const ino = statSync(log).ino;
    expect(await rotateLogIfNeeded(log, 1000)).toBe(true);
    expect(statSync(log).size).toBe(0);
    expect(statSync(log).ino).toBe(ino);
    const old = statSync(`${log}.1`);
    expect(old.mode & 0o777).toBe(0o640);
    expect(old.gid).toBe(100);
    expect(readFileSync(`${log}.1`, 'utf8')).toBe('x'.repeat(2000));
  });

  it('gives the old generation no more than 0640 even from a 0644 log an older agent wrote', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, 'y'.repeat(2000), { mode: 0o644 });
    await rotateLogIfNeeded(log, 1000);
    expect(statSync(`${log}.1`).mode & 0o777).toBe(0o640);
  });

  it('refuses a symlink at the log path: the target is neither truncated nor copied (security review, finding 9)', async () => {
    const victim = join(dir, 'victim-shadow');
    writeFileSync(victim, 'z'.repeat(4200), { mode: 0o600 });
    symlinkSync(victim, join(dir, 's.log'));
    await expect(rotateLogIfNeeded(join(dir, 's.log'), 1000)).rejects.toThrow(/is a symlink; refused/);
    expect(statSync(victim).size).toBe(4200);
    expect(() => statSync(join(dir, 's.log.1'))).toThrow(/ENOENT/);
  });

  it('refuses a FIFO at the log path instead of blocking on it', async () => {
    execFileSync('mkfifo', [join(dir, 's.log')]);
    await expect(rotateLogIfNeeded(join(dir, 's.log'), 0)).rejects.toThrow(/not a regular file/);
  });

  it('writes through a stale temp file left by a crash, never through a symlink planted as one', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, 'w'.repeat(2000));
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'keep');
    symlinkSync(victim, `${log}.1.tmp`);
    expect(await rotateLogIfNeeded(log, 1000)).toBe(true);
    expect(readFileSync(victim, 'utf8')).toBe('keep');
    expect(readFileSync(`${log}.1`, 'utf8')).toBe('w'.repeat(2000));
  });
});

describe('tail and follow', () => {
  it('refuse to read a log through a symlink', async () => {
    const victim = join(dir, 'secret');
    writeFileSync(victim, 'root only\n', { mode: 0o600 });
    symlinkSync(victim, join(dir, 's.log'));
    await expect(tailFile(join(dir, 's.log'), 10)).rejects.toThrow(/is a symlink; refused/);
    const follow = followFile(join(dir, 's.log'), { signal: AbortSignal.timeout(5000), isDone: () => true, backlogLines: 5 });
    await expect(follow.next()).rejects.toThrow(/is a symlink; refused/);
  });

  it('refuse a FIFO without blocking', async () => {
    execFileSync('mkfifo', [join(dir, 'f.log')]);
    await expect(tailFile(join(dir, 'f.log'), 10)).rejects.toThrow(/not a regular file/);
  });
});
