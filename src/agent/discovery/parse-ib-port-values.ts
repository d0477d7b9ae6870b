/**
 * Values of /sys/class/infiniband/<hca>/ports/<n>/* as the kernel writes
 * them, with or without a trailing newline:
 *   state       "4: ACTIVE"            → "ACTIVE"
 *   phys_state  "5: LinkUp"            → "LinkUp"
 *   rate        "200 Gb/sec (4X HDR)"  → 200, "2.5 Gb/sec (1X SDR)" → 2.5
 */

/** "4: ACTIVE" → "ACTIVE"; a value without the numeric prefix is returned trimmed. */
export function parseIbPortState(value: string): string {
  const v = value.trim();
  const m = /^\d+\s*:\s*(.*)$/.exec(v);
  return m ? (m[1] as string).trim() : v;
}

/** Gb/s from a rate file; 0 when it says nothing usable. */
export function parseIbRateGbps(value: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*Gb\/sec/i.exec(value);
  return m ? Number(m[1]) : 0;
}

/**
 * link_layer as written; a missing file means InfiniBand (the attribute
 * was added with RoCE, ibstatus makes the same assumption).
 */
export function parseLinkLayer(value: string | undefined): string {
  const v = value?.trim() ?? '';
  return v === '' ? 'InfiniBand' : v;
}

/** A sysfs numa_node value: -1 when absent or not a number (the kernel itself writes -1). */
export function parseNumaNode(value: string | undefined): number {
  const v = value?.trim() ?? '';
  return /^-?\d+$/.test(v) ? Number(v) : -1;
}
