import { describe, expect, it } from 'vitest';
import { mapConcurrent } from '../../src/lib/map-concurrent.js';
import { deferred } from '../helpers/deferred.js';

const turn = () => new Promise((r) => setImmediate(r));

describe('mapConcurrent', () => {
  it('answers in the items’ order whatever order the calls end in, never more than the limit at once', async () => {
    const ends = [0, 1, 2, 3, 4].map(() => deferred<string>());
    const started: number[] = [];
    let inFlight = 0;
    let most = 0;
    const all = mapConcurrent(['a', 'b', 'c', 'd', 'e'], 2, async (item, i) => {
      started.push(i);
      most = Math.max(most, ++inFlight);
      try {
        return `${item}${await (ends[i] as ReturnType<typeof deferred<string>>).promise}`;
      } finally {
        inFlight--;
      }
    });
    await turn();
    expect(started).toEqual([0, 1]);
    // The second ends first: the third takes its place, the first still running.
    ends[1]?.resolve('1');
    await turn();
    expect(started).toEqual([0, 1, 2]);
    for (const i of [4, 3, 2, 0]) ends[i]?.resolve(String(i));
    expect(await all).toEqual(['a0', 'b1', 'c2', 'd3', 'e4']);
    expect(most).toBe(2);
  });

  it('answers nothing for no items, and runs each of fewer items than the limit at once', async () => {
    expect(await mapConcurrent([], 8, async () => 1)).toEqual([]);
    let inFlight = 0;
    let most = 0;
    const gate = deferred<void>();
    const all = mapConcurrent([1, 2, 3], 8, async (n) => {
      most = Math.max(most, ++inFlight);
      await gate.promise;
      return n * 2;
    });
    await turn();
    gate.resolve();
    expect(await all).toEqual([2, 4, 6]);
    expect(most).toBe(3);
  });

  it('rejects with the first error once the calls started have settled, and starts none after it', async () => {
    const ends = [0, 1, 2].map(() => deferred<number>());
    const started: number[] = [];
    let settled = 0;
    const all = mapConcurrent([0, 1, 2], 2, async (i) => {
      started.push(i);
      try {
        return await (ends[i] as ReturnType<typeof deferred<number>>).promise;
      } finally {
        settled++;
      }
    });
    let outcome: unknown;
    all.catch((err: unknown) => {
      outcome = err;
    });
    await turn();
    ends[0]?.reject(new Error('first'));
    await turn();
    // The second is still running: the whole waits for it, and the third never starts.
    expect(outcome).toBeUndefined();
    expect(started).toEqual([0, 1]);
    ends[1]?.reject(new Error('second'));
    await expect(all).rejects.toThrow('first');
    expect(settled).toBe(2);
    expect(started).toEqual([0, 1]);
  });

  it('refuses a limit that is not a positive whole number, naming it', async () => {
    for (const limit of [0, -1, 1.5, Number.NaN]) {
      await expect(mapConcurrent([1], limit, async (n) => n)).rejects.toThrow(`limit must be a positive integer, not ${limit}`);
    }
  });
});
