import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { followFile } from '../../../src/lib/files/follow-file.js';
import { completeLinesEnd, TAIL_CHUNK_BYTES, tailFile } from '../../../src/lib/files/tail-file.js';

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
      // The end of the backlog.
      expect((await it.next()).value).toEqual([]);
      appendFileSync(path, 'tial\nd\n');
      const seen: string[] = [];
      while (seen.length < 2) seen.push(...((await it.next()).value as string[]));
      expect(seen).toEqual(['partial', 'd']);
    } finally {
      ac.abort();
      await it.return?.(undefined);
    }
  });

  it('gives only the empty batch that ends the backlog for a file not there yet, then its lines once it is', async () => {
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

describe('followFile of a big log', () => {
  it('gives a long backlog in batches of a chunk, ended by an empty batch', async () => {
    const path = file('xxxxxxx\n'.repeat(50_000));
    const ac = new AbortController();
    const batches: string[][] = [];
    for await (const batch of followFile(path, { signal: ac.signal, isDone: () => false, pollMs: 20, backlogLines: 40_000 })) {
      if (batch.length === 0) break;
      batches.push(batch);
    }
    ac.abort();
    expect(batches.flat()).toHaveLength(40_000);
    expect(Math.max(...batches.map((b) => b.length * 8))).toBeLessThanOrEqual(TAIL_CHUNK_BYTES);
  });

  it('gives what a writer wrote far ahead in batches of a chunk, not as one', async () => {
    const path = file('');
    const ac = new AbortController();
    const it = followFile(path, { signal: ac.signal, isDone: () => false, pollMs: 20 })[Symbol.asyncIterator]();
    try {
      const first = it.next();
      // After the follow has seen the empty file: all of this is new.
      await sleep(100);
      appendFileSync(path, 'yyyyyyy\n'.repeat(100_000));
      const batches = [(await first).value as string[]];
      while (batches.flat().length < 100_000) batches.push((await it.next()).value as string[]);
      expect(batches.length).toBeGreaterThan(10);
      expect(Math.max(...batches.map((b) => b.length * 8))).toBeLessThanOrEqual(TAIL_CHUNK_BYTES);
    } finally {
      ac.abort();
      await it.return?.(undefined);
    }
  });

  it('ends quietly when its signal aborts during the backlog', async () => {
    const path = file('zzzzzzz\n'.repeat(50_000));
    const ac = new AbortController();
    const it = followFile(path, { signal: ac.signal, isDone: () => false, pollMs: 20, backlogLines: 40_000 })[Symbol.asyncIterator]();
    expect(((await it.next()).value as string[]).length).toBeGreaterThan(0);
    ac.abort();
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });
});
