import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LlmgwError } from '../../src/lib/errors.js';
import { readPemFile } from '../../src/lib/read-pem-file.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-pem-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function errorOf(fn: () => unknown): LlmgwError {
  try {
    fn();
  } catch (err) {
    if (err instanceof LlmgwError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('readPemFile', () => {
  it('reads the file as it is', () => {
    const path = join(dir, 'ca.pem');
    writeFileSync(path, '-----BEGIN CERTIFICATE-----\n');
    expect(readPemFile(path, 'tls.ca').toString()).toBe('-----BEGIN CERTIFICATE-----\n');
  });

  it('refuses a missing file as a configuration error naming the key, the path and why', () => {
    const err = errorOf(() => readPemFile(join(dir, 'absent.pem'), 'tls.cert'));
    expect(err.kind).toBe('config');
    expect(err.message).toBe(`tls.cert: cannot read ${join(dir, 'absent.pem')}: no such file`);
  });

  it('says a directory is a directory', () => {
    expect(errorOf(() => readPemFile(dir, 'tls key')).message).toBe(`tls key: cannot read ${dir}: it is a directory`);
  });
});
