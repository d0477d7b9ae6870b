import { describe, expect, it } from 'vitest';
import { LineClock, lineTime, withTimestamp } from '../../../src/lib/files/log-line-time.js';

const NOW = new Date(2026, 11, 2, 12, 0, 0).getTime();

describe('lineTime: RFC 3339 / ISO 8601', () => {
  it('reads a UTC time with its fraction', () => {
    expect(lineTime('2026-12-02T02:31:28.123Z INFO started', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28, 123));
    expect(lineTime('2026-12-02T02:31:28z x', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28));
  });

  it('applies an explicit offset', () => {
    expect(lineTime('2026-12-02T04:31:28+02:00 x', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28));
    expect(lineTime('2026-12-02T02:31:28.5-01:00 x', NOW)).toBe(Date.UTC(2026, 11, 2, 3, 31, 28, 500));
  });

  it("reads SGLang's bracketed, zoneless time as local time", () => {
    expect(lineTime('[2026-12-02 02:31:28] Load weight begin', NOW)).toBe(new Date(2026, 11, 2, 2, 31, 28).getTime());
    expect(lineTime('2026-12-02 02:31:28,456 logging style', NOW)).toBe(new Date(2026, 11, 2, 2, 31, 28, 456).getTime());
  });
});

describe("lineTime: vLLM's INFO MM-DD hh:mm:ss", () => {
  it('reads it as local time in the current year', () => {
    expect(lineTime('INFO 12-02 02:31:28 [api_server.py:12] Started', NOW)).toBe(new Date(2026, 11, 2, 2, 31, 28).getTime());
    expect(lineTime('WARNING 06-15 08:00:00 [x.py:1] w', NOW)).toBe(new Date(2026, 5, 15, 8, 0, 0).getTime());
  });

  it("puts December's lines read in January in last year", () => {
    const jan = new Date(2027, 0, 1, 10, 0, 0).getTime();
    expect(lineTime('ERROR 12-31 23:59:00 [x.py:1] e', jan)).toBe(new Date(2026, 11, 31, 23, 59, 0).getTime());
  });

  it('allows a line at most a day ahead of now in this year, not beyond', () => {
    const jan = new Date(2027, 0, 1, 10, 0, 0).getTime();
    expect(lineTime('INFO 01-02 00:00:00 [x.py:1] i', jan)).toBe(new Date(2027, 0, 2, 0, 0, 0).getTime());
    expect(lineTime('INFO 01-03 00:00:00 [x.py:1] i', jan)).toBe(new Date(2026, 0, 3, 0, 0, 0).getTime());
  });

  it('does not read an unknown level as vLLM', () => {
    expect(lineTime('NOTICE 12-02 02:31:28 x', NOW)).toBeUndefined();
  });
});

describe('lineTime: JSON lines', () => {
  it("reads pino's epoch ms time", () => {
    expect(lineTime('{"level":30,"time":1764642688123,"msg":"x"}', NOW)).toBe(1764642688123);
  });

  it('reads time, timestamp or ts as a date string', () => {
    expect(lineTime('{"timestamp":"2026-12-02T02:31:28Z"}', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28));
    expect(lineTime('{"ts":"2026-12-02T02:31:28.250Z"}', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28, 250));
    expect(lineTime('{"time":"2026-12-02T02:31:28Z"}', NOW)).toBe(Date.UTC(2026, 11, 2, 2, 31, 28));
  });

  it('does not read epoch seconds as ms, nor an unparsable or broken line', () => {
    expect(lineTime('{"time":1764642688}', NOW)).toBeUndefined();
    expect(lineTime('{"ts":"yesterday"}', NOW)).toBeUndefined();
    expect(lineTime('{"time": 1764642688123', NOW)).toBeUndefined();
  });
});

describe('lineTime: anything else', () => {
  it.each(['Traceback (most recent call last):', '  File "x.py", line 1', '', 'started at 2026-12-02T02:31:28Z'])('has no time: %j', (line) => {
    expect(lineTime(line, NOW)).toBeUndefined();
  });
});

describe('LineClock', () => {
  it('gives an untimed line the last timed line before it, or the fallback before any', () => {
    const clock = new LineClock(() => NOW);
    expect(clock.timeOf('Traceback', 111)).toBe(111);
    expect(clock.timeOf('Traceback')).toBeUndefined();
    const t = Date.UTC(2026, 11, 2, 2, 31, 28);
    expect(clock.timeOf('2026-12-02T02:31:28Z boom', 111)).toBe(t);
    expect(clock.timeOf('  File "x.py"', 222)).toBe(t);
    const t2 = Date.UTC(2026, 11, 2, 2, 31, 29);
    expect(clock.timeOf('2026-12-02T02:31:29Z next')).toBe(t2);
    expect(clock.timeOf('continuation')).toBe(t2);
  });

  it('reads vLLM years against its own clock', () => {
    const clock = new LineClock(() => new Date(2027, 0, 1, 10, 0, 0).getTime());
    expect(clock.timeOf('INFO 12-31 23:59:00 [x.py:1] e')).toBe(new Date(2026, 11, 31, 23, 59, 0).getTime());
  });
});

describe('withTimestamp', () => {
  it('puts the time in front as RFC 3339 UTC, or "-" when none is known', () => {
    expect(withTimestamp('hello', Date.UTC(2026, 11, 2, 2, 31, 28, 5))).toBe('2026-12-02T02:31:28.005Z hello');
    expect(withTimestamp('hello', undefined)).toBe('- hello');
  });
});
