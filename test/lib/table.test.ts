import { describe, expect, it } from 'vitest';
import { renderTable, truncate } from '../../src/lib/table.js';

describe('renderTable', () => {
  it('cuts a cell past its column limit with an ellipsis, so later columns stay on screen', () => {
    const long = 'x'.repeat(200);
    const out = renderTable(['KEY', 'VALUE', 'SOURCE'], [['k', long, 'default']], { maxWidths: [undefined, 10] });
    expect(out.split('\n')[1]).toBe(`k    ${'x'.repeat(9)}…  default`);
  });

  it('leaves cells within the limit, and any cell without one, whole', () => {
    expect(truncate('short', 10)).toBe('short');
    expect(truncate('x'.repeat(50), undefined)).toBe('x'.repeat(50));
  });
});
