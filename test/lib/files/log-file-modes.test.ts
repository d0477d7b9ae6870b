import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LOG_DIR_MODE, LOG_FILE_MODE, ensureDirectory, prepareLogFile } from '../../../src/lib/files/log-file-modes.js';

const USERS_GID = 100;
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-modes-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('ensureDirectory', () => {
  it('creates the directory with its mode and group whatever the umask', () => {
    const old = process.umask(0o077);
    try {
      ensureDirectory(join(dir, 'shards'), LOG_DIR_MODE, USERS_GID);
    } finally {
      process.umask(old);
    }
    const st = statSync(join(dir, 'shards'));
    expect(st.mode & 0o7777).toBe(0o750);
    expect(st.gid).toBe(USERS_GID);
  });

  it('tightens a 0755 directory an older agent left', () => {
    mkdirSync(join(dir, 'shards'), { mode: 0o755 });
    chmodSync(join(dir, 'shards'), 0o755);
    ensureDirectory(join(dir, 'shards'), LOG_DIR_MODE);
    expect(statSync(join(dir, 'shards')).mode & 0o7777).toBe(0o750);
  });

  it('refuses a symlink planted at the path and leaves its target as it was', () => {
    const target = join(dir, 'elsewhere');
    mkdirSync(target, { mode: 0o755 });
    chmodSync(target, 0o755);
    symlinkSync(target, join(dir, 'shards'));
    expect(() => ensureDirectory(join(dir, 'shards'), LOG_DIR_MODE, USERS_GID)).toThrow(/not a symlink/);
    expect(statSync(target).mode & 0o7777).toBe(0o755);
    expect(statSync(target).gid).toBe(0);
  });
});

describe('prepareLogFile', () => {
  it('creates the log 0640 with the admin group, and tightens an existing 0644 one', () => {
    const log = join(dir, 'a.log');
    prepareLogFile(log, USERS_GID);
    expect(statSync(log).mode & 0o777).toBe(LOG_FILE_MODE);
    expect(statSync(log).gid).toBe(USERS_GID);
    const old = join(dir, 'b.log');
    writeFileSync(old, 'x', { mode: 0o644 });
    prepareLogFile(old);
    expect(statSync(old).mode & 0o777).toBe(0o640);
  });

  it('refuses a symlink and a FIFO planted at the log path, without blocking on the FIFO', () => {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'precious', { mode: 0o600 });
    symlinkSync(victim, join(dir, 'link.log'));
    expect(() => prepareLogFile(join(dir, 'link.log'))).toThrow(/cannot open the shard log/);
    expect(statSync(victim).mode & 0o777).toBe(0o600);
    execFileSync('mkfifo', [join(dir, 'fifo.log')]);
    // No reader: a non-blocking open for writing fails at once (ENXIO); with one, fstat refuses it.
    expect(() => prepareLogFile(join(dir, 'fifo.log'))).toThrow(/cannot open the shard log .*ENXIO|not a regular file/);
  });
});
