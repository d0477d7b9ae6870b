import { describe, expect, it } from 'vitest';
import { compareComputeCapability } from '../../../src/agent/engines/compare-compute-capability.js';

describe('compareComputeCapability', () => {
  it('compares major then minor as numbers', () => {
    expect(compareComputeCapability('10.0', '9.0')).toBeGreaterThan(0);
    expect(compareComputeCapability('8.9', '9.0')).toBeLessThan(0);
    expect(compareComputeCapability('8.6', '8.0')).toBeGreaterThan(0);
    expect(compareComputeCapability('9.0', '9.0')).toBe(0);
    expect(() => compareComputeCapability('9', '9.0')).toThrow('not a compute capability: 9');
  });
});
