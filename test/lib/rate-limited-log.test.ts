import { describe, expect, it } from 'vitest';
import { RateLimitedLog } from '../../src/lib/rate-limited-log.js';
import { captureLogger } from '../helpers/capture-logger.js';

describe('RateLimitedLog', () => {
  it('writes the first record of a message, counts repeats within the interval, and reports them with the next', () => {
    const { logger, records: all } = captureLogger();
    const records = () => all;
    let now = 0;
    const log = new RateLimitedLog(logger, { intervalMs: 1000, nowMs: () => now });
    expect(log.warn({ shard: 'a' }, 'refused a drain')).toBe(true);
    for (let i = 0; i < 400_000; i++) log.warn({ shard: `x${i}` }, 'refused a drain');
    expect(log.warn({}, 'another message')).toBe(true);
    now = 1000;
    expect(log.warn({ shard: 'b' }, 'refused a drain')).toBe(true);
    const drains = records().filter((r) => r.msg === 'refused a drain');
    expect(drains.map((r) => [r.shard, r.suppressed])).toEqual([
      ['a', undefined],
      ['b', 400_000],
    ]);
    expect(records()).toHaveLength(3);
  });
});
