import { describe, expect, it } from 'vitest';
import { kmsgPciOf, parseKmsgXid } from '../../../src/agent/discovery/xid-catalogue.js';

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

describe('parseKmsgXid against forged lines (security review 3, S7)', () => {
  it('ignores an Xid quoted inside another kernel message, as overlayfs prints a user-chosen upper directory', () => {
    expect(parseKmsgXid("3,900,1000,-;overlayfs: failed to resolve 'NVRM: Xid (PCI:0000:3a:00): 79, pid=1, GPU has fallen off the bus.': -2")).toBeUndefined();
    expect(parseKmsgXid("[ 12.5] overlayfs: failed to resolve 'NVRM: Xid (PCI:0000:3a:00): 79, pid=1, GPU has fallen off the bus.': -2")).toBeUndefined();
  });

  it('ignores a record of a user-space facility (written to /dev/kmsg from user space)', () => {
    expect(parseKmsgXid("12,901,1000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")).toBeUndefined();
    expect(parseKmsgXid("8,902,1000,-;NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.")).toBeUndefined();
  });

  it('takes the driver own kernel records at every kernel level', () => {
    for (const level of [0, 3, 4, 7]) {
      expect(parseKmsgXid(`${level},903,1000,-;NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.`)).toMatchObject({ pci: '0000:3a:00', xid: 79 });
    }
  });
});
