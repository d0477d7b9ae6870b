import { describe, expect, it } from 'vitest';
import { formatDuration, parseByteSize, parseDuration, parseDurationArg } from '../../src/lib/duration.js';

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['5s', 5000],
    ['2m', 120_000],
    ['1h', 3_600_000],
    ['1h30m', 5_400_000],
    ['1.5s', 1500],
    ['0', 0],
  ])('reads %s as %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['5', '5 seconds', 's', '-1s', '5d', '', '1s2'])('refuses %j', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });

  it('round-trips through formatDuration', () => {
    for (const ms of [250, 1500, 5000, 120_000, 3_600_000]) {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    }
  });
});

describe('parseByteSize', () => {
  it('reads plain numbers and binary and decimal units', () => {
    expect(parseByteSize(67108864)).toBe(67108864);
    expect(parseByteSize('64MiB')).toBe(64 * 1024 * 1024);
    expect(parseByteSize('64MB')).toBe(64_000_000);
    expect(parseByteSize('1g')).toBe(1024 ** 3);
  });

  it('reads terabytes, binary and decimal (walkthrough 4, O13)', () => {
    expect(parseByteSize('1TiB')).toBe(1024 ** 4);
    expect(parseByteSize('2tb')).toBe(2 * 1000 ** 4);
    expect(parseByteSize('1.5T')).toBe(1.5 * 1024 ** 4);
    // Look-alike: a unit past T is still no size.
    expect(parseByteSize('1PiB')).toBeUndefined();
  });

  it('refuses what is not a size', () => {
    expect(parseByteSize('lots')).toBeUndefined();
    expect(parseByteSize('5 parsecs')).toBeUndefined();
    expect(parseByteSize(-3)).toBeUndefined();
  });
});

describe('parseDurationArg', () => {
  it('says what was given and how to write it, in the one wording every command uses', () => {
    expect(() => parseDurationArg('--timeout', 'forever')).toThrow('--timeout "forever" is not a duration; write it like 500ms, 5s or 2m');
  });

  it('refuses 0 where it must be more than 0, as a duration that is not allowed, not as a non-duration', () => {
    expect(() => parseDurationArg('--timeout', '0s', { positive: true })).toThrow('--timeout must be more than 0, got "0s"');
    expect(parseDurationArg('--load-time', '0s')).toBe(0);
    expect(parseDurationArg('--timeout', '1m30s', { positive: true })).toBe(90_000);
  });
});
