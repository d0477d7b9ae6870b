import chalk from 'chalk';

export interface RenderTableOptions {
  /** Per column, the widest a cell may be; a longer one is cut and ends in "…". The last column is never padded. */
  maxWidths?: readonly (number | undefined)[];
}

/**
 * Renders rows as an aligned plain-text table with a bold header. Colour is
 * chalk's decision (none when stdout is not a terminal), and widths are
 * measured without colour codes.
 */
export function renderTable(header: readonly string[], rows: readonly (readonly string[])[], opts: RenderTableOptions = {}): string {
  const cut = rows.map((r) => r.map((c, i) => truncate(c, opts.maxWidths?.[i])));
  const widths = header.map((h, i) => Math.max(visibleLength(h), ...cut.map((r) => visibleLength(r[i] ?? ''))));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat((widths[i] as number) - visibleLength(c))))
      .join('  ')
      .trimEnd();
  return [chalk.bold(line(header)), ...cut.map(line)].join('\n');
}

/** `s` cut to `max` visible characters, the last one "…"; as it is when it fits or no limit is set. Cells with colour codes are left whole. */
export function truncate(s: string, max: number | undefined): string {
  if (max === undefined || s.length <= max || s.length !== visibleLength(s)) return s;
  return `${s.slice(0, Math.max(0, max - 1))}…`;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escapes is the point
const ANSI = /\u001b\[[0-9;]*m/g;

export function visibleLength(s: string): number {
  return s.replace(ANSI, '').length;
}
