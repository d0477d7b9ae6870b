import { describe, expect, it } from 'vitest';
import { STALLED_OUTBOX_FLOOR_MS, stalledOutboxLimitMs } from '../../../src/agent/connection/control-plane-session.js';

describe('how long a stream that takes nothing is kept (stream_stall_timeout)', () => {
  it('unset or 0s: 5 heartbeats, never under the 10 s floor, as before the key', () => {
    expect(STALLED_OUTBOX_FLOOR_MS).toBe(10_000);
    expect(stalledOutboxLimitMs(5000)).toBe(25_000);
    expect(stalledOutboxLimitMs(5000, 0)).toBe(25_000);
    expect(stalledOutboxLimitMs(200)).toBe(10_000);
    expect(stalledOutboxLimitMs(2000)).toBe(10_000);
    expect(stalledOutboxLimitMs(3000)).toBe(15_000);
  });

  it('set: that limit, below the floor and above five heartbeats alike', () => {
    expect(stalledOutboxLimitMs(200, 3000)).toBe(3000);
    expect(stalledOutboxLimitMs(5000, 3000)).toBe(3000);
    expect(stalledOutboxLimitMs(5000, 120_000)).toBe(120_000);
  });
});
