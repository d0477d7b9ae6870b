/**
 * The Xid catalogue: how the kernel log names an Xid, what each one means
 * and which leave the GPU lost, and the sentences for the other GPU faults.
 */

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
// Anchored: the driver's record begins with it. Kernel messages that quote
// user input (overlayfs naming an upper directory it cannot resolve, which
// any user may mount in a user namespace of its own) carry the same words
// later in the line (security review 3, S7).
const XID_MESSAGE = /^NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\):\s*(\d+)(?:,\s*(.*?))?\s*$/;
// /dev/kmsg's record prefix: "<syslog prefix>,<sequence>,<µs since boot>,<flags>;"
const KMSG_PREFIX = /^(\d+),\d+,(\d+),[^;]*;/;
// dmesg's "[ 1234.567890] " before the message.
const DMESG_TIME = /^\[\s*\d+\.\d+\]\s/;
/**
 * The syslog prefix (facility × 8 + level) of a kernel record is below 8:
 * records written to /dev/kmsg from user space take the user facility
 * (devkmsg_write in the kernel's printk.c sets LOG_USER when none is given),
 * so a value of 8 or more is not the driver's.
 */
const KERNEL_FACILITY_MAX = 7;

/**
 * An NVRM Xid record from /dev/kmsg (with its record prefix), dmesg, or a
 * plain copy; undefined for every other line. NVML does not deliver every
 * Xid, and "fallen off the bus" may appear here alone. Only a kernel record
 * whose message begins as the NVIDIA driver writes it counts.
 */
export function parseKmsgXid(line: string): KmsgXid | undefined {
  const prefix = KMSG_PREFIX.exec(line);
  if (prefix && Number(prefix[1]) > KERNEL_FACILITY_MAX) return undefined;
  const message = prefix ? line.slice(prefix[0].length) : line.replace(DMESG_TIME, '');
  const m = XID_MESSAGE.exec(message);
  if (!m) return undefined;
  return {
    pci: `${(m[1] as string).slice(-4)}:${m[2]}:${m[3]}`.toLowerCase(),
    xid: Number(m[4]),
    detail: m[5] ?? '',
    usecSinceBoot: prefix ? Number(prefix[2]) : undefined,
  };
}

/** "00000000:5D:00.0" (nvidia-smi, NVML) → "0000:5d:00", the form Xid lines use. */
export function kmsgPciOf(busId: string): string {
  const m = /^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})/.exec(busId);
  return m ? `${(m[1] as string).slice(-4)}:${m[2]}:${m[3]}`.toLowerCase() : '';
}

// The operator's sentence for a GPU fault, one wording for discovery, the
// health watch and preflight, so a fault reads the same wherever it shows.

/** What the common Xids mean (NVIDIA's Xid catalogue); others are named by number. */
const XID_MEANINGS: Record<number, string> = {
  13: 'graphics engine exception',
  31: 'GPU memory page fault',
  43: 'GPU stopped processing',
  45: 'preemptive cleanup, due to previous errors',
  48: 'double-bit ECC error',
  61: 'internal micro-controller breakpoint/warning',
  62: 'internal micro-controller halt',
  63: 'ECC page retirement or row remapping recording event',
  64: 'ECC page retirement or row remapper recording failure',
  68: 'video processor exception',
  74: 'NVLink error',
  79: 'GPU has fallen off the bus',
  92: 'high single-bit ECC error rate',
  94: 'contained ECC error',
  95: 'uncontained ECC error',
  109: 'context switch timeout',
  119: 'GSP RPC timeout',
  120: 'GSP error',
};

/** Xids after which the GPU cannot be trusted until it is reset. 79: off the bus, so lost. */
export const LOST_XIDS: ReadonlySet<number> = new Set([79]);
/**
 * Xids that make a GPU unfit until it is reset (NVIDIA's Xid catalogue:
 * "reset GPU" or "contact support"). Xids 13, 31, 43 and friends are the
 * application's own faults: reported as events, never a GPU fault.
 */
export const FAULT_XIDS: ReadonlySet<number> = new Set([48, 62, 64, 74, 79, 92, 94, 95, 119, 120]);
/** Xid 74: an NVLink error, reported as NVLINK_DOWN. */
export const NVLINK_XID = 74;

export function describeXid(xid: number): string {
  const meaning = XID_MEANINGS[xid];
  return meaning ? `Xid ${xid}: ${meaning}` : `Xid ${xid}`;
}

export const GPU_LOST_MESSAGE = 'GPU is lost (NVML_ERROR_GPU_IS_LOST): it has fallen off the bus or become inaccessible; reset the GPU or reboot';

export function describeDoubleBitEcc(count: number): string {
  return `${count} double-bit ECC error${count === 1 ? '' : 's'} since the driver loaded; drain the GPU and reset it`;
}

export const ROW_REMAP_PENDING_MESSAGE = 'row remap pending: a memory row awaits remapping, which needs a GPU reset';
export const ROW_REMAP_FAILURE_MESSAGE = 'row remap failure: the GPU ran out of spare memory rows; it needs service';
