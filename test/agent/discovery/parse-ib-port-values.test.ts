import { describe, expect, it } from 'vitest';
import { parseIbPortState, parseIbRateGbps, parseLinkLayer, parseNumaNode } from '../../../src/agent/discovery/parse-ib-port-values.js';

describe('InfiniBand sysfs values', () => {
  it('takes the name from numbered states, with or without a newline', () => {
    expect(parseIbPortState('4: ACTIVE')).toBe('ACTIVE');
    expect(parseIbPortState('1: DOWN\n')).toBe('DOWN');
    expect(parseIbPortState('5: LinkUp\n')).toBe('LinkUp');
    expect(parseIbPortState('ACTIVE')).toBe('ACTIVE');
  });

  it('reads the rate in Gb/s', () => {
    expect(parseIbRateGbps('200 Gb/sec (4X HDR)')).toBe(200);
    expect(parseIbRateGbps('400 Gb/sec (4X NDR)\n')).toBe(400);
    expect(parseIbRateGbps('2.5 Gb/sec (1X SDR)')).toBe(2.5);
    expect(parseIbRateGbps('')).toBe(0);
  });

  it('takes a missing link_layer for InfiniBand and an unreadable numa_node for -1', () => {
    expect(parseLinkLayer(undefined)).toBe('InfiniBand');
    expect(parseLinkLayer('Ethernet\n')).toBe('Ethernet');
    expect(parseNumaNode(undefined)).toBe(-1);
    expect(parseNumaNode('1\n')).toBe(1);
    expect(parseNumaNode('-1')).toBe(-1);
  });
});
