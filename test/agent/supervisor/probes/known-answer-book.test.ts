import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KnownAnswerBook } from '../../../../src/agent/supervisor/probes/known-answer-book.js';

/* The node's known answers on disk (known-answers.json, adapters/answers.json): kept for a restarted agent, and never written after close. */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const key = { digest: 'sha256:abc', profile: 'default', engineVersion: '0.9.1' };

function book() {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-answer-book-'));
  dirs.push(dir);
  const path = join(dir, 'answers.json');
  return { path, dir, b: new KnownAnswerBook(path) };
}

describe('KnownAnswerBook', () => {
  it('close() resolves once the answer recorded before it is on disk, with no temp file left', async () => {
    const { path, dir, b } = book();
    void b.record(key, { text: ' Paris' });
    await b.close();
    expect(new KnownAnswerBook(path).get(key)).toEqual({ text: ' Paris' });
    expect(readdirSync(dir)).toEqual(['answers.json']);
  });

  it('keeps an answer recorded after close in memory only: the agent is going away', async () => {
    const { path, b } = book();
    await b.close();
    await b.record(key, { text: ' Paris' });
    expect(b.get(key)).toEqual({ text: ' Paris' });
    expect(existsSync(path)).toBe(false);
  });
});
