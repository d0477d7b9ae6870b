import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findGroup } from '../../src/lib/find-group.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-group-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, 'group');
writeFileSync(file, ['# comment', 'root:x:0:', 'llmgw:x:990:alice,bob', '', 'broken-line', 'ops:x:991:'].join('\n'));

describe('findGroup', () => {
  it('finds a group by name, with its members', () => {
    expect(findGroup({ name: 'llmgw' }, file)).toEqual({ name: 'llmgw', gid: 990, members: ['alice', 'bob'] });
  });

  it('finds a group by gid', () => {
    expect(findGroup({ gid: 991 }, file)?.name).toBe('ops');
  });

  it('finds nothing for an unknown name, and skips malformed lines', () => {
    expect(findGroup({ name: 'broken-line' }, file)).toBeUndefined();
    expect(findGroup({ name: 'nope' }, file)).toBeUndefined();
  });

  it('finds nothing when the file cannot be read', () => {
    expect(findGroup({ name: 'root' }, join(dir, 'missing'))).toBeUndefined();
  });
});
