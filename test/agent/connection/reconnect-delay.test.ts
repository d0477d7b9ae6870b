import { describe, expect, it } from 'vitest';
import { cleanCloseDelayMs, JITTER_ENV, jitterSource, reconnectDelayMs } from '../../../src/agent/connection/reconnect-delay.js';

describe('reconnectDelayMs', () => {
  it('doubles from the base and stops at the maximum', () => {
    const whole = (attempt: number) => reconnectDelayMs(attempt, 1000, 30_000, () => 1);
    expect([1, 2, 3, 4, 5, 6, 7, 20].map(whole)).toEqual([1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  it('jitters over the whole delay, from none to all of it', () => {
    expect(reconnectDelayMs(3, 1000, 30_000, () => 0)).toBe(0);
    expect(reconnectDelayMs(3, 1000, 30_000, () => 0.5)).toBe(2000);
    const draws = Array.from({ length: 2000 }, () => reconnectDelayMs(4, 1000, 30_000));
    for (const d of draws) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(8000);
    }
    // The lower half gets its share too: a fleet's retries are not bunched at the top.
    expect(draws.filter((d) => d < 4000).length).toBeGreaterThan(800);
  });

  it('does not overflow on a very long outage', () => {
    expect(reconnectDelayMs(10_000, 1000, 30_000, () => 1)).toBe(30_000);
  });
});

describe('cleanCloseDelayMs', () => {
  it('is a uniform point in [0, base): none at the bottom, just under the base at the top', () => {
    expect(cleanCloseDelayMs(1000, () => 0)).toBe(0);
    expect(cleanCloseDelayMs(1000, () => 0.25)).toBe(250);
    expect(cleanCloseDelayMs(1000, () => 0.999_999)).toBe(999);
  });

  it('spreads real random draws over the whole window', () => {
    const draws = Array.from({ length: 2000 }, () => cleanCloseDelayMs(1000));
    for (const d of draws) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(1000);
    }
    // Each tenth of the window gets some: no clustering at one end.
    const tenths = new Set(draws.map((d) => Math.floor(d / 100)));
    expect(tenths.size).toBe(10);
  });

  it('is no delay for a zero or negative base', () => {
    expect(cleanCloseDelayMs(0, () => 0.9)).toBe(0);
    expect(cleanCloseDelayMs(-5, () => 0.9)).toBe(0);
  });
});

describe('jitterSource', () => {
  it('draws at random by default', () => {
    const r = jitterSource({});
    expect(r.backoff).toBe(Math.random);
    expect(r.cleanClose).toBe(Math.random);
  });

  it(`with ${JITTER_ENV}=off, gives the whole backoff and no delay after a clean close`, () => {
    const r = jitterSource({ [JITTER_ENV]: 'off' });
    expect(reconnectDelayMs(2, 1000, 30_000, r.backoff)).toBe(2000);
    expect(cleanCloseDelayMs(1000, r.cleanClose)).toBe(0);
  });
});
