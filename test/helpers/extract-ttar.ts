import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * Writes a ttar archive (the text tar prometheus/procfs keeps sysfs
 * fixtures in) under `dir`: "Directory: p", or "Path: p" / "Lines: n" and n
 * lines of content, each entry followed by "Mode: …".
 */
export function extractTtar(text: string, dir: string): void {
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const d = /^Directory: (.+)$/.exec(line);
    if (d) {
      mkdirSync(join(dir, d[1] as string), { recursive: true });
      continue;
    }
    const p = /^Path: (.+)$/.exec(line);
    if (!p) continue;
    const count = /^Lines: (\d+)/.exec(lines[i + 1] ?? '');
    if (!count) continue;
    const n = Number(count[1]);
    const body = lines.slice(i + 2, i + 2 + n);
    const file = join(dir, p[1] as string);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, n === 0 ? '' : `${body.join('\n')}\n`);
    i += 1 + n;
  }
}
