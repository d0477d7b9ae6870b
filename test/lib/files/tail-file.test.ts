import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tailFile } from '../../../src/lib/files/tail-file.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-tail-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const file = (text: string | Buffer) => {
  const p = join(dir, `f${n++}`);
  writeFileSync(p, text);
  return p;
};

describe('tailFile', () => {
  it.each([
    ['a file ending in a newline', 'a\nb\nc\n', 2, ['b', 'c']],
    ['a last line without newline', 'a\nb\nc', 2, ['b', 'c']],
    ['fewer lines than asked', 'a\nb\n', 10, ['a', 'b']],
    ['an empty file', '', 5, []],
    ['blank lines', 'a\n\n\nb\n', 3, ['', '', 'b']],
    ['zero lines asked', 'a\n', 0, []],
  ])('handles %s', async (_what, text, lines, expected) => {
    expect(await tailFile(file(text), lines)).toEqual(expected);
  });

  it('finds lines across its read chunks, multi-byte characters intact', async () => {
    const lines = Array.from({ length: 5000 }, (_, i) => `línea ${i} ${'x'.repeat(i % 97)}`);
    expect(await tailFile(file(`${lines.join('\n')}\n`), 1500)).toEqual(lines.slice(-1500));
  });

  it('returns nothing for a missing file', async () => {
    expect(await tailFile(join(dir, 'missing'), 3)).toEqual([]);
  });
});
