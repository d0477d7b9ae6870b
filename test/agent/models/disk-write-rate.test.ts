import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { measureDiskWriteLater } from '../../../src/agent/models/disk-write-rate.js';
import { createLogger } from '../../../src/lib/logger.js';

/* The agent's disk probe, once after its delay, never after its life ended nor without a store (issue 52, item 5). */

const root = mkdtempSync(join(tmpdir(), 'llmgw-disk-rate-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('measureDiskWriteLater', () => {
  it('measures once after its delay, and not at all when the agent stopped first or has no store', async () => {
    const logger = await createLogger({ level: 'silent' });
    const measured = new Promise<number>((resolve) => measureDiskWriteLater({ cacheDir: join(root, 'store'), signal: new AbortController().signal, logger, onRate: (bytes) => resolve(bytes), delayMs: 10 }));
    expect(await measured).toBe(64 * 1024 * 1024);
    const stopped = new AbortController();
    let calls = 0;
    measureDiskWriteLater({ cacheDir: join(root, 'stopped'), signal: stopped.signal, logger, onRate: () => calls++, delayMs: 50 });
    stopped.abort();
    measureDiskWriteLater({ cacheDir: '', signal: new AbortController().signal, logger, onRate: () => calls++, delayMs: 0 });
    await new Promise((r) => setTimeout(r, 300));
    expect(calls).toBe(0);
    // A probe that had started would have made the store's folder at once, long before it ended.
    expect(existsSync(join(root, 'stopped'))).toBe(false);
  });
});
