/** Eight heights, lowest first: what `spark` and most TUI sparklines use. */
const TICKS = '▁▂▃▄▅▆▇█';

/**
 * The last `width` values as a sparkline, scaled to `max` (default: the
 * largest of them). Padded on the left with spaces while history is short,
 * so the newest value is always the rightmost character. A value that is
 * not a number (NaN: unknown) is a space, a gap in the line.
 */
export function sparkline(values: readonly number[], width: number, max?: number): string {
  const shown = values.slice(-width);
  const top = max ?? Math.max(0, ...shown.filter(Number.isFinite));
  const ticks = shown.map((v) => {
    if (!Number.isFinite(v)) return ' ';
    if (top <= 0) return TICKS[0];
    const i = Math.round((Math.max(0, Math.min(v, top)) / top) * (TICKS.length - 1));
    return TICKS[i];
  });
  return ' '.repeat(width - shown.length) + ticks.join('');
}

/** `used / total` as a bar of `width` cells: █ for the used part, ░ for the rest. */
export function bar(used: number, total: number, width: number): string {
  const share = total > 0 ? Math.max(0, Math.min(1, used / total)) : 0;
  const full = Math.round(share * width);
  return '█'.repeat(full) + '░'.repeat(width - full);
}
