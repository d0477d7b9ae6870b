import { describe, expect, it } from 'vitest';
import { MAX_LINE_CHARS, splitLines } from '../../../src/lib/files/split-lines.js';

describe('splitLines', () => {
  it.each([
    ['a final newline', 'a\nb\n', ['a', 'b', '']],
    ['an unfinished last line', 'a\nb', ['a', 'b']],
    ['blank lines', '\n\n', ['', '', '']],
    ['no newline', 'abc', ['abc']],
  ])('splits text with %s, the last element what is left over', (_what, text, parts) => {
    expect(splitLines(text)).toEqual(parts);
  });

  it('cuts a line longer than MAX_LINE_CHARS into pieces, the unfinished one too', () => {
    const long = 'x'.repeat(2 * MAX_LINE_CHARS + 3);
    expect(splitLines(`${long}\ny`).map((p) => p.length)).toEqual([MAX_LINE_CHARS, MAX_LINE_CHARS, 3, 1]);
    expect(splitLines(`a\n${long}`).map((p) => p.length)).toEqual([1, MAX_LINE_CHARS, MAX_LINE_CHARS, 3]);
  });

  it('never cuts between the halves of a surrogate pair', () => {
    const text = `${'x'.repeat(MAX_LINE_CHARS - 1)}🙂tail`;
    const parts = splitLines(text);
    expect(parts[0]).toBe('x'.repeat(MAX_LINE_CHARS - 1));
    expect(parts.join('')).toBe(text);
  });
});
