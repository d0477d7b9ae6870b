/** Content-Range names bytes from `start` (to `end`, exclusive, when given) of a file of `size` (or `*`). */
export function contentRangeIs(header: string | null | undefined, start: number, end: number | undefined, size: number): boolean {
  const m = header == null ? null : /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header.trim());
  if (m === null || Number(m[1]) !== start) return false;
  if (end !== undefined && Number(m[2]) !== end - 1) return false;
  return m[3] === '*' || Number(m[3]) === size;
}
