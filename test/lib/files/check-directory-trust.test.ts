import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { assertTrustedDirectory } from '../../../src/lib/files/check-directory-trust.js';
import { LlmgwError } from '../../../src/lib/errors.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-trust-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const refusal = (path: string): LlmgwError => {
  try {
    assertTrustedDirectory(path, 'supervisor.log_dir');
  } catch (err) {
    if (err instanceof LlmgwError) return err;
    throw err;
  }
  throw new Error('not refused');
};

describe('assertTrustedDirectory', () => {
  it('accepts a root-owned 0755 directory under the sticky, world-writable /tmp', () => {
    mkdirSync(join(dir, 'log'), { mode: 0o755 });
    expect(() => assertTrustedDirectory(join(dir, 'log'), 'supervisor.log_dir')).not.toThrow();
  });

  it('accepts a directory that does not exist yet, judged by its parent', () => {
    expect(() => assertTrustedDirectory(join(dir, 'not', 'yet'), 'supervisor.log_dir')).not.toThrow();
  });

  it('refuses a directory owned by another user, naming it, as a configuration error (exit 78)', () => {
    mkdirSync(join(dir, 'log'));
    chownSync(join(dir, 'log'), 65534, 65534);
    const err = refusal(join(dir, 'log'));
    expect(err.kind).toBe('config');
    expect(err.message).toBe(`supervisor.log_dir: directory ${join(dir, 'log')} is owned by uid 65534, not root (chown root ${join(dir, 'log')}); only root may write there, or choose another supervisor.log_dir`);
  });

  it('refuses a group-writable directory even with the sticky bit: only parents get that exception', () => {
    mkdirSync(join(dir, 'log'));
    chmodSync(join(dir, 'log'), 0o1777);
    expect(refusal(join(dir, 'log')).message).toMatch(/is writable by group or others \(mode 1777/);
  });

  it('refuses a directory under a parent others can write to, and a missing one under it', () => {
    mkdirSync(join(dir, 'open'));
    chmodSync(join(dir, 'open'), 0o777);
    mkdirSync(join(dir, 'open', 'log'));
    expect(refusal(join(dir, 'open', 'log')).message).toMatch(`directory ${join(dir, 'open')} is writable by group or others (mode 0777`);
    expect(refusal(join(dir, 'open', 'missing')).message).toMatch(`directory ${join(dir, 'open')} is writable`);
  });

  it('judges what a symlink points at, not the link', () => {
    mkdirSync(join(dir, 'real'));
    chownSync(join(dir, 'real'), 65534, 65534);
    symlinkSync(join(dir, 'real'), join(dir, 'link'));
    expect(refusal(join(dir, 'link')).message).toMatch(`directory ${join(dir, 'real')} is owned by uid 65534`);
  });
});
