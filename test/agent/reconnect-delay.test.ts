import { describe, expect, it } from 'vitest';
import { reconnectDelayMs } from '../../src/agent/reconnect-delay.js';

describe('reconnectDelayMs', () => {
  it('doubles from the base and stops at the maximum', () => {
    const whole = (attempt: number) => reconnectDelayMs(attempt, 1000, 30_000, () => 1);
    expect([1, 2, 3, 4, 5, 6, 7, 20].map(whole)).toEqual([1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  it('jitters between half and the whole delay', () => {
    expect(reconnectDelayMs(3, 1000, 30_000, () => 0)).toBe(2000);
    expect(reconnectDelayMs(3, 1000, 30_000, () => 0.5)).toBe(3000);
    for (let i = 0; i < 100; i++) {
      const d = reconnectDelayMs(4, 1000, 30_000);
      expect(d).toBeGreaterThanOrEqual(4000);
      expect(d).toBeLessThanOrEqual(8000);
    }
  });

  it('does not overflow on a very long outage', () => {
    expect(reconnectDelayMs(10_000, 1000, 30_000, () => 1)).toBe(30_000);
  });
});
