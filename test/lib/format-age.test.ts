import { describe, expect, it } from 'vitest';
import { formatAge } from '../../src/lib/format-age.js';

describe('formatAge', () => {
  it.each([
    [0, '0s'],
    [42_900, '42s'],
    [60_000, '1m'],
    [192_000, '3m12s'],
    [3_600_000, '1h'],
    [5 * 3_600_000 + 4 * 60_000 + 59_000, '5h4m'],
    [2 * 86_400_000 + 3 * 3_600_000, '2d3h'],
    [-5000, '0s'],
  ])('shows %i ms as %s', (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});
