import { describe, expect, it } from 'vitest';
import { crashLoopDelayMs, failuresInARow } from '../../src/control/crash-loop-backoff.js';

describe('crash-loop backoff', () => {
  it('waits 5 s after the first failure, doubling after each further one, at most 5 min', () => {
    const delays = [1, 2, 3, 4, 5, 6, 7, 8, 40].map((n) => crashLoopDelayMs(n, { baseMs: 5_000, maxMs: 300_000 }));
    expect(delays).toEqual([5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
    expect(crashLoopDelayMs(2000, { baseMs: 5_000, maxMs: 300_000 })).toBe(300_000);
    expect(crashLoopDelayMs(0, { baseMs: 5_000, maxMs: 300_000 })).toBe(0);
  });

  it('counts failures in a row, and starts again after the replica stayed ready long enough', () => {
    expect(failuresInARow(4, undefined, 1_000, 300_000)).toBe(5);
    expect(failuresInARow(4, 0, 299_999, 300_000)).toBe(5);
    expect(failuresInARow(4, 0, 300_000, 300_000)).toBe(1);
  });
});
