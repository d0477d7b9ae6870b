import { describe, expect, it } from 'vitest';
import { PLAIN_PROGRESS_EVERY_MS, PullProgress } from '../../src/models/pull-progress.js';

/* A pull's whole progress (walkthrough 3: per-file bytes only, and nothing between `fetching` and `verified` on a pipe). */

const MiB = 1024 * 1024;

describe('PullProgress', () => {
  it('says bytes of the total, the rate since the first byte and the time left, on a clock the test drives', () => {
    let now = 1000;
    const p = new PullProgress(() => now);
    p.observe({ kind: 'plan', commit: 'c', files: 2, bytes: 200 * MiB, fetchFiles: 2, fetchBytes: 200 * MiB });
    expect(p.line()).toBe('0 B of 200 MiB (0%)');
    p.observe({ kind: 'file-progress', path: 'a', bytes: 0, size: 100 * MiB });
    now += 2000;
    p.observe({ kind: 'file-progress', path: 'a', bytes: 40 * MiB, size: 100 * MiB });
    p.observe({ kind: 'file-progress', path: 'b', bytes: 10 * MiB, size: 100 * MiB });
    expect(p.line()).toBe('50 MiB of 200 MiB (25%), 25 MiB/s, about 6 s left');
    p.observe({ kind: 'file-done', path: 'a', size: 100 * MiB, fetched: 100 * MiB, resumedFrom: 0, mismatches: 0 });
    expect(p.done).toBe(110 * MiB);
  });

  it('gives a pipe a line every ten seconds of a long pull, and none before the first byte', () => {
    let now = 0;
    const p = new PullProgress(() => now);
    p.observe({ kind: 'plan', commit: 'c', files: 1, bytes: 100 * MiB, fetchFiles: 1, fetchBytes: 100 * MiB });
    expect(p.plainLineDue()).toBeUndefined();
    p.observe({ kind: 'file-progress', path: 'a', bytes: 1 * MiB, size: 100 * MiB });
    now += PLAIN_PROGRESS_EVERY_MS - 1;
    expect(p.plainLineDue()).toBeUndefined();
    now += 1;
    expect(p.plainLineDue()).toMatch(/^progress: 1 MiB of 100 MiB \(1%\), .*\/s, about .* left$/);
    expect(p.plainLineDue()).toBeUndefined();
  });
});
