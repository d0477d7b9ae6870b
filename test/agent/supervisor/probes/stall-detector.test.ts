import { describe, expect, it } from 'vitest';
import { type MetricSample, StallDetector } from '../../../../src/agent/supervisor/probes/stall-detector.js';

const at = (s: number, requestsRunning: number | undefined, progress: number | undefined): MetricSample => ({
  atMs: s * 1000,
  requestsRunning,
  progress,
});

/** Feeds samples taken every `everyS` seconds; returns each verdict's state. */
function run(d: StallDetector, samples: [running: number | undefined, tokens: number | undefined][], everyS = 10) {
  return samples.map(([r, t], i) => d.observe(at(i * everyS, r, t)));
}

describe('StallDetector', () => {
  it('reports stalled, with the reason, when requests run and no token comes for stall_timeout', () => {
    const d = new StallDetector({ stallTimeoutMs: 60_000 });
    const verdicts = run(d, [
      [3, 100],
      [3, 180], // tokens flow up to here (t=10 s)
      [3, 180],
      [3, 180],
      [3, 180],
      [3, 180],
      [3, 180], // t=60 s: 50 s flat
      [3, 180], // t=70 s: 60 s flat
    ]);
    expect(verdicts.map((v) => v.state)).toEqual(['flowing', 'flowing', 'flowing', 'flowing', 'flowing', 'flowing', 'flowing', 'stalled']);
    expect(verdicts.at(-1)?.reason).toBe('stalled: 3 requests running, no token generated for 60 s');
  });

  it('is flowing again as soon as the counter moves', () => {
    const d = new StallDetector({ stallTimeoutMs: 20_000 });
    const states = run(d, [[1, 5], [1, 5], [1, 5], [1, 5], [1, 6], [1, 6]]).map((v) => v.state);
    expect(states).toEqual(['flowing', 'flowing', 'stalled', 'stalled', 'flowing', 'flowing']);
    expect(d.observe(at(60, 1, 6)).reason).toBe('stalled: 1 request running, no token generated for 20 s');
  });

  it('never alarms on an idle engine, however long its counter is flat', () => {
    const d = new StallDetector({ stallTimeoutMs: 20_000 });
    const states = run(d, Array.from({ length: 30 }, () => [0, 500] as [number, number])).map((v) => v.state);
    expect(new Set(states)).toEqual(new Set(['idle']));
  });

  it('never alarms on a slow engine that makes a token every few seconds', () => {
    const d = new StallDetector({ stallTimeoutMs: 10_000 });
    // Sampled every 2 s, one token every 4 s: flat between, never for 10 s.
    const samples = Array.from({ length: 40 }, (_, i) => [2, Math.floor(i / 2)] as [number, number]);
    expect(run(d, samples, 2).filter((v) => v.state === 'stalled')).toEqual([]);
  });

  it('starts the clock afresh when requests begin after idle, rather than counting the idle time', () => {
    const d = new StallDetector({ stallTimeoutMs: 30_000 });
    const states = run(d, [[0, 7], [0, 7], [0, 7], [0, 7], [2, 7], [2, 7], [2, 7], [2, 7]]).map((v) => v.state);
    expect(states).toEqual(['idle', 'idle', 'idle', 'idle', 'flowing', 'flowing', 'flowing', 'stalled']);
  });

  it('takes a counter that went down as progress: the engine restarted, it is not stuck', () => {
    const d = new StallDetector({ stallTimeoutMs: 20_000 });
    const states = run(d, [[1, 900], [1, 900], [1, 3], [1, 3]]).map((v) => v.state);
    expect(states).toEqual(['flowing', 'flowing', 'flowing', 'flowing']);
  });

  it('says unknown, and judges nothing, when the engine exports no such series', () => {
    const d = new StallDetector({ stallTimeoutMs: 10_000 });
    const verdicts = run(d, [[2, undefined], [2, undefined], [undefined, 5], [2, 5], [2, 5]]);
    expect(verdicts.map((v) => v.state)).toEqual(['unknown', 'unknown', 'unknown', 'flowing', 'stalled']);
    expect(verdicts[0]?.reason).toBe('the engine exports no progress counter (tokens, finished requests)');
    expect(verdicts[2]?.reason).toBe('the engine exports no requests-running gauge');
  });

  it('is off with stall_timeout 0s, and refuses a negative one', () => {
    const d = new StallDetector({ stallTimeoutMs: 0 });
    expect(run(d, [[5, 1], [5, 1], [5, 1]]).map((v) => v.state)).toEqual(['off', 'off', 'off']);
    expect(() => new StallDetector({ stallTimeoutMs: -1 })).toThrow('stallTimeoutMs must be a duration of 0 or more, got -1');
  });
});
