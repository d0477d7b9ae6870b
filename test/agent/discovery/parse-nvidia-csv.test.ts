import { describe, expect, it } from 'vitest';
import { cellMarker, isFaultMarker, parseMib } from '../../../src/agent/discovery/parse-nvidia-csv.js';

describe('nvidia-smi CSV cells', () => {
  it('tells fault markers from markers for absent values', () => {
    for (const m of ['GPU requires reset', 'Unknown Error', 'GPU is lost']) expect(isFaultMarker(m), m).toBe(true);
    for (const m of ['N/A', 'Not Supported', 'Insufficient Permissions', 'Requested functionality has been deprecated']) {
      expect(isFaultMarker(m), m).toBe(false);
    }
    expect(cellMarker(' [GPU requires reset] ')).toBe('GPU requires reset');
    expect(cellMarker('81559')).toBeUndefined();
  });

  it('reads MiB with or without units and rejects junk', () => {
    expect(parseMib('81559')).toBe(81559);
    expect(parseMib('59 MiB')).toBe(59);
    expect(parseMib('[N/A]')).toBeUndefined();
    expect(parseMib('')).toBeUndefined();
    expect(parseMib('12 parsecs')).toBeUndefined();
  });
});
