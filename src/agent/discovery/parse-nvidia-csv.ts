/**
 * The CSV that `nvidia-smi --query-*` prints, split into named cells.
 *
 * nvidia-smi's CSV is not RFC 4180: no quoting, ", " between cells, units in
 * the header (`memory.used [MiB]`) and, without `nounits`, in the values
 * (`59 MiB`). A GPU that the driver cannot talk to may be reported by a line
 * that is not CSV at all ("Unable to determine the device handle for GPU
 * 0000:5D:00.0: Unknown Error"); such lines are kept as `strays`, in order,
 * so that a caller can still list that GPU instead of silently dropping it.
 */
export interface NvidiaCsv {
  /** Field names as queried, units stripped: "memory.used". */
  fields: string[];
  /** One entry per output line, in output order. */
  lines: NvidiaCsvLine[];
}

export type NvidiaCsvLine = { kind: 'row'; cells: Record<string, string> } | { kind: 'stray'; text: string };

/** "memory.used [MiB]" → "memory.used". */
export function fieldName(header: string): string {
  return header.replace(/\s*\[[^\]]*\]\s*$/, '').trim();
}

/**
 * Splits nvidia-smi CSV. With `fields` (the list passed to --query-*), the
 * text is taken as `noheader` output, though a header line is still
 * recognised and skipped; without it, the first line must be the header.
 * The last field absorbs any extra commas, so put free-text fields such as
 * process_name last in a query.
 */
export function parseNvidiaCsv(text: string, fields?: readonly string[]): NvidiaCsv {
  const all = text.split(/\r?\n/).map((l) => l.trim());
  const nonEmpty = all.filter((l) => l !== '');
  let names: string[];
  let body: string[];
  if (fields === undefined) {
    const header = nonEmpty[0];
    if (header === undefined) return { fields: [], lines: [] };
    names = header.split(',').map(fieldName);
    body = nonEmpty.slice(1);
  } else {
    names = [...fields];
    const first = nonEmpty[0];
    const looksLikeHeader = first !== undefined && first.split(',').map(fieldName).join(',') === names.join(',');
    body = looksLikeHeader ? nonEmpty.slice(1) : nonEmpty;
  }

  const lines: NvidiaCsvLine[] = body.map((line) => {
    const parts = line.split(',');
    if (parts.length < names.length || names.length === 0) return { kind: 'stray', text: line };
    // Free text in the last field may itself contain commas.
    const head = parts.slice(0, names.length - 1);
    const tail = parts.slice(names.length - 1).join(',');
    const cells: Record<string, string> = {};
    [...head, tail].forEach((v, i) => {
      cells[names[i] as string] = v.trim();
    });
    return { kind: 'row', cells };
  });
  return { fields: names, lines };
}

/**
 * nvidia-smi's markers for "no value": `[N/A]`, `[Not Supported]`,
 * `[GPU requires reset]`, `[Unknown Error]`, `[Insufficient Permissions]`…
 * Returns the text inside the brackets, or undefined for a real value.
 */
export function cellMarker(cell: string): string | undefined {
  const m = /^\[(.*)\]$/.exec(cell.trim());
  return m ? (m[1] as string).trim() : undefined;
}

/**
 * Markers that say the GPU is broken, as opposed to "no such value here"
 * ([N/A], [Not Supported], [Insufficient Permissions], and newer drivers'
 * [Requested functionality has been deprecated] on a few fields of every
 * healthy GPU). Matched by what faults say, so a new harmless marker does not
 * take a healthy GPU out of service.
 */
const FAULT_MARKER = /reset|error|lost|fail|fallen off|timeout/i;

export function isFaultMarker(marker: string): boolean {
  return FAULT_MARKER.test(marker);
}

const MIB_PER_UNIT: Record<string, number> = { '': 1, mib: 1, mb: 1, gib: 1024, gb: 1024, kib: 1 / 1024, kb: 1 / 1024 };

/** "81559", "81559 MiB", "80 GiB" → MiB; undefined for markers, empty cells and junk. */
export function parseMib(cell: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$/.exec(cell.trim());
  if (!m) return undefined;
  const factor = MIB_PER_UNIT[(m[2] as string).toLowerCase()];
  if (factor === undefined) return undefined;
  return Math.round(Number(m[1]) * factor);
}
