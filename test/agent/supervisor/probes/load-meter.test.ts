import { describe, expect, it } from 'vitest';
import { LoadMeter } from '../../../../src/agent/supervisor/probes/load-meter.js';

describe('LoadMeter', () => {
  it('gives the token rate between two successive reads, and in flight as read', () => {
    const m = new LoadMeter();
    expect(m.observe({ atMs: 1000, inFlight: 2, tokens: 100 })).toEqual({ inFlight: 2, tokensPerSecond: undefined });
    expect(m.observe({ atMs: 1500, inFlight: 3, tokens: 150 })).toEqual({ inFlight: 3, tokensPerSecond: 100 });
    expect(m.observe({ atMs: 2500, inFlight: 0, tokens: 150 })).toEqual({ inFlight: 0, tokensPerSecond: 0 });
  });

  it('knows no rate across a counter that fell (the engine restarted its count), nor across a read without the counter', () => {
    const m = new LoadMeter();
    m.observe({ atMs: 0, inFlight: 1, tokens: 500 });
    expect(m.observe({ atMs: 1000, inFlight: 1, tokens: 20 }).tokensPerSecond).toBeUndefined();
    expect(m.observe({ atMs: 2000, inFlight: 1, tokens: 70 }).tokensPerSecond).toBe(50);
    expect(m.observe({ atMs: 3000, inFlight: undefined, tokens: undefined })).toEqual({ inFlight: undefined, tokensPerSecond: undefined });
    // The baseline went with the missing counter: one that comes back may have restarted from 0.
    expect(m.observe({ atMs: 4000, inFlight: 1, tokens: 90 }).tokensPerSecond).toBeUndefined();
  });

  it('gives no rate for two reads at the same instant', () => {
    const m = new LoadMeter();
    m.observe({ atMs: 10, inFlight: 0, tokens: 1 });
    expect(m.observe({ atMs: 10, inFlight: 0, tokens: 5 }).tokensPerSecond).toBeUndefined();
  });
});
