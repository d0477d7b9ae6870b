import chalk from 'chalk';

/**
 * Renders rows as an aligned plain-text table with a bold header. Colour is
 * chalk's decision (none when stdout is not a terminal), and widths are
 * measured without colour codes.
 */
export function renderTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(visibleLength(h), ...rows.map((r) => visibleLength(r[i] ?? ''))));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat((widths[i] as number) - visibleLength(c))))
      .join('  ')
      .trimEnd();
  return [chalk.bold(line(header)), ...rows.map(line)].join('\n');
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escapes is the point
const ANSI = /\u001b\[[0-9;]*m/g;

export function visibleLength(s: string): number {
  return s.replace(ANSI, '').length;
}
