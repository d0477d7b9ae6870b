/** One NVRM Xid report from the kernel log. */
export interface KmsgXid {
  /** The GPU's PCI address as the driver prints it, normalised to "0000:5d:00". */
  pci: string;
  xid: number;
  /** The driver's own words after the Xid, e.g. "pid=1234, name=python, Ch 00000008"; may be "". */
  detail: string;
  /** /dev/kmsg's timestamp (µs since boot) when the line carries one. */
  usecSinceBoot?: number;
}

// "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
const XID_LINE = /NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\):\s*(\d+)(?:,\s*(.*?))?\s*$/;
// /dev/kmsg's record prefix: "<priority>,<sequence>,<µs since boot>,<flags>;"
const KMSG_PREFIX = /^\d+,\d+,(\d+),[^;]*;/;

/**
 * An NVRM Xid line from /dev/kmsg (with its record prefix), dmesg, or a
 * plain copy; undefined for every other line. NVML does not deliver every
 * Xid, and "fallen off the bus" may appear here alone.
 */
export function parseKmsgXid(line: string): KmsgXid | undefined {
  const m = XID_LINE.exec(line);
  if (!m) return undefined;
  const prefix = KMSG_PREFIX.exec(line);
  return {
    pci: `${(m[1] as string).slice(-4)}:${m[2]}:${m[3]}`.toLowerCase(),
    xid: Number(m[4]),
    detail: m[5] ?? '',
    usecSinceBoot: prefix ? Number(prefix[1]) : undefined,
  };
}

/** "00000000:5D:00.0" (nvidia-smi, NVML) → "0000:5d:00", the form Xid lines use. */
export function kmsgPciOf(busId: string): string {
  const m = /^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})/.exec(busId);
  return m ? `${(m[1] as string).slice(-4)}:${m[2]}:${m[3]}`.toLowerCase() : '';
}
