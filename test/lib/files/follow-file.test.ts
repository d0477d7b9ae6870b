import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { followFile } from '../../../src/lib/files/follow-file.js';
import { completeLinesEnd, tailFile } from '../../../src/lib/files/tail-file.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-follow-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const file = (text: string) => {
  const p = join(dir, `f${n++}`);
  writeFileSync(p, text);
  return p;
};

describe('completeLinesEnd and tailFile up to it', () => {
  it.each([
    ['ends in a newline', 'a\nb\n', 4],
    ['ends mid-line', 'a\nb\npar', 4],
    ['has no newline', 'partial', 0],
    ['is empty', '', 0],
  ])('finds where the last complete line of a file that %s ends', async (_what, text, end) => {
    expect(await completeLinesEnd(file(text), text.length)).toBe(end);
  });

  it('tails only what comes before the offset', async () => {
    expect(await tailFile(file('a\nb\nc\nd\n'), 2, 4)).toEqual(['a', 'b']);
  });
});

describe('followFile with a backlog', () => {
  it('starts with the last complete lines, then goes on from right after them: nothing twice, nothing missed', async () => {
    const path = file('a\nb\nc\npar');
    const ac = new AbortController();
    const it = followFile(path, { signal: ac.signal, isDone: () => false, pollMs: 20, backlogLines: 2 })[Symbol.asyncIterator]();
    try {
      expect((await it.next()).value).toEqual(['b', 'c']);
      appendFileSync(path, 'tial\nd\n');
      const seen: string[] = [];
      while (seen.length < 2) seen.push(...((await it.next()).value as string[]));
      expect(seen).toEqual(['partial', 'd']);
    } finally {
      ac.abort();
      await it.return?.(undefined);
    }
  });

  it('gives an empty first batch for a file not there yet, then its lines once it is', async () => {
    const path = join(dir, 'later.log');
    const ac = new AbortController();
    const it = followFile(path, { signal: ac.signal, isDone: () => false, pollMs: 20, backlogLines: 5 })[Symbol.asyncIterator]();
    try {
      expect((await it.next()).value).toEqual([]);
      writeFileSync(path, 'first\n');
      expect((await it.next()).value).toEqual(['first']);
    } finally {
      ac.abort();
      await it.return?.(undefined);
    }
  });
});
