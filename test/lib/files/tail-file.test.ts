import { mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_LINE_CHARS } from '../../../src/lib/files/split-lines.js';
import { TAIL_CHUNK_BYTES, TAIL_MAX_BYTES, tailFile, tailLines } from '../../../src/lib/files/tail-file.js';

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

/** Every batch tailLines gives, in order. */
async function batchesOf(path: string, lines: number, opts: Parameters<typeof tailLines>[2] = {}): Promise<string[][]> {
  const out: string[][] = [];
  for await (const batch of tailLines(path, lines, opts)) out.push(batch);
  return out;
}

/** Whether this process still has `path` open. */
const isOpen = (path: string) =>
  readdirSync('/proc/self/fd').some((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === path;
    } catch {
      return false;
    }
  });

describe('tailLines', () => {
  it('streams the last N lines of a big log a chunk at a time: no batch holds more than one chunk of text', async () => {
    // 2 MiB of 8-byte lines, the review's log in small: 262,144 lines.
    const path = file(Buffer.alloc(2 * 1024 * 1024, 'xxxxxxx\n'));
    const batches = await batchesOf(path, 100_000);
    expect(batches.flat()).toEqual(Array(100_000).fill('xxxxxxx'));
    expect(batches.length).toBeGreaterThan(10);
    for (const b of batches) {
      expect(b.length).toBeGreaterThan(0);
      expect(b.reduce((n, line) => n + line.length + 1, 0)).toBeLessThanOrEqual(TAIL_CHUNK_BYTES);
    }
  });

  it('reaches back at most TAIL_MAX_BYTES, cutting the first line short, and hands a line without newlines out in pieces', async () => {
    const path = file(Buffer.alloc(TAIL_MAX_BYTES + 1000, 'z'));
    const lines = await tailFile(path, 5);
    expect(lines.join('')).toBe('z'.repeat(TAIL_MAX_BYTES));
    expect(lines.length).toBe(Math.ceil(TAIL_MAX_BYTES / MAX_LINE_CHARS));
    expect(Math.max(...lines.map((l) => l.length))).toBe(MAX_LINE_CHARS);
  });

  it('counts a long line once among the lines asked for, and gives it whole across its pieces', async () => {
    const long = `${'é'.repeat(MAX_LINE_CHARS)}🙂${'w'.repeat(MAX_LINE_CHARS)}`;
    const lines = await tailFile(file(`a\nb\n${long}\nc\n`), 3);
    expect(lines[0]).toBe('b');
    expect(lines.at(-1)).toBe('c');
    const pieces = lines.slice(1, -1);
    expect(pieces.length).toBeGreaterThan(1);
    // The emoji's two UTF-16 halves stay in one piece.
    expect(pieces.join('')).toBe(long);
    expect(pieces.every((p) => p.length <= MAX_LINE_CHARS && !/[\ud800-\udbff]$/.test(p))).toBe(true);
  });

  it('ends the last batch with a last line that has no newline, and gives no empty line for a final one', async () => {
    expect((await batchesOf(file('x\ny\nlast'), 2)).flat()).toEqual(['y', 'last']);
    expect((await batchesOf(file('x\ny\n\n'), 2)).flat()).toEqual(['y', '']);
    expect(await batchesOf(file('\n'), 3)).toEqual([['']]);
  });

  it('stops between chunks when its signal aborts, with the reason, and closes the file', async () => {
    const path = file(Buffer.alloc(1024 * 1024, 'xxxxxxx\n'));
    const ac = new AbortController();
    const it = tailLines(path, 10_000, { signal: ac.signal });
    expect(((await it.next()).value as string[]).length).toBeGreaterThan(0);
    ac.abort(new Error('the client left'));
    await expect(it.next()).rejects.toThrow('the client left');
    expect(isOpen(path)).toBe(false);
    // Aborted before it starts: nothing is opened.
    await expect(tailLines(path, 5, { signal: ac.signal }).next()).rejects.toThrow('the client left');
  });

  it('reads as if the file ended at endAt', async () => {
    expect(await tailFile(file('a\nb\nc\nd\n'), 5, 4)).toEqual(['a', 'b']);
  });
});
