import { describe, expect, it } from 'vitest';
import { filterYielding } from '../../src/models/filter-yielding.js';
import { includeMatcher } from '../../src/models/match-include.js';

/*
 * Security review 4, S3: the worst include patterns within checkPrefetch's
 * bounds held the event loop 1.6 s against 5000 names. The filter now
 * yields between slices: the loop runs other work while it goes on.
 */

/** Holds the thread for `ms` of wall time, as a slow match does. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('filterYielding', () => {
  it('lets the event loop run between slices of a long filter, and keeps what Array.filter keeps', async () => {
    const items = Array.from({ length: 100 }, (_, i) => i);
    let done = 0;
    let doneWhenLoopRan: number | undefined;
    setImmediate(() => {
      doneWhenLoopRan = done;
    });
    const kept = await filterYielding(items, (i) => {
      busy(2);
      done++;
      return i % 3 === 0;
    });
    expect(kept).toEqual(items.filter((i) => i % 3 === 0));
    // 200 ms of matching: the loop got a turn after the first 10 ms slice, not after all of it.
    expect(doneWhenLoopRan).toBeDefined();
    expect(doneWhenLoopRan).toBeLessThan(100);
  });

  it('matches include patterns as before (look-alike: short work, same result)', async () => {
    const names = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'config.json', 'original/consolidated.pth'];
    const m = includeMatcher(['*.safetensors', 'config.json']);
    expect(await filterYielding(names, m)).toEqual(names.filter(m));
  });

  it('stops at an abort between slices', async () => {
    const ac = new AbortController();
    const p = filterYielding(Array.from({ length: 100 }, (_, i) => i), () => {
      busy(2);
      ac.abort();
      return true;
    }, ac.signal);
    await expect(p).rejects.toThrow(/abort/i);
  });
});
