import { describe, expect, it } from 'vitest';
import { kmsgPciOf, parseKmsgXid } from '../../../src/agent/health/xid-catalogue.js';

describe('parseKmsgXid', () => {
  it('reads a /dev/kmsg record, a dmesg line and a plain copy alike', () => {
    expect(parseKmsgXid("4,2071,5123456789,-;NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")).toEqual({
      pci: '0000:5d:00',
      xid: 79,
      detail: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
      usecSinceBoot: 5123456789,
    });
    expect(parseKmsgXid('[ 1234.567890] NVRM: Xid (PCI:0000:AB:00): 48, pid=77, name=python, An uncorrectable double bit error')).toMatchObject({
      pci: '0000:ab:00',
      xid: 48,
      usecSinceBoot: undefined,
    });
    expect(parseKmsgXid('NVRM: Xid (PCI:00000000:18:00.0): 94')).toMatchObject({ pci: '0000:18:00', xid: 94, detail: '' });
  });

  it('ignores every other line', () => {
    expect(parseKmsgXid('6,100,1,-;usb 1-1: new high-speed USB device')).toBeUndefined();
    expect(parseKmsgXid('NVRM: GPU at PCI:0000:5d:00: GPU-3f1c...')).toBeUndefined();
    expect(parseKmsgXid('')).toBeUndefined();
  });

  it('puts an NVML or nvidia-smi bus id in the kernel log form', () => {
    expect(kmsgPciOf('00000000:5D:00.0')).toBe('0000:5d:00');
    expect(kmsgPciOf('')).toBe('');
  });
});
