import { describe, expect, it } from 'vitest';
import { parseSince } from '../../src/ctl/parse-since.js';

describe('parseSince', () => {
  const now = Date.parse('2026-12-02T03:00:00Z');
  it('reads a duration as that long ago, and an RFC 3339 time with its zone', () => {
    expect(parseSince('10m', now)).toBe(now - 600_000);
    expect(parseSince('2026-12-02T02:00:00Z', now)).toBe(Date.parse('2026-12-02T02:00:00Z'));
    expect(parseSince('2026-12-02T04:00:00.5+02:00', now)).toBe(Date.parse('2026-12-02T02:00:00.500Z'));
  });

  it('refuses a time without a zone and anything else, as a usage error naming the flag', () => {
    expect(() => parseSince('2026-12-02T02:00:00', now)).toThrow(/--since "2026-12-02T02:00:00" is neither a duration nor an RFC 3339 time/);
    expect(() => parseSince('yesterday', now)).toThrow(expect.objectContaining({ kind: 'usage' }));
  });
});
