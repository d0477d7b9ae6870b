/**
 * The operator's sentence for a GPU fault, one wording for discovery, the
 * health watch and preflight, so a fault reads the same wherever it shows.
 */

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
