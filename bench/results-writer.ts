/**
 * The run's report: the table of figures and the notes under a heading that
 * names the date, the machine and the Node version, printed and appended to
 * bench/RESULTS.md (created with its preamble if missing); a profiled run
 * (--cpu-prof) is printed only.
 */
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from '../test/helpers/run-cli.js';
import type { BenchRow } from './fleet-figure.js';

function table(rows: BenchRow[]): string {
  const head = '| # | figure | measured | reference | target | met |\n|---|---|---|---|---|---|';
  return [head, ...rows.map((r, i) => `| ${i + 1} | ${r.figure} | ${r.measured} | ${r.reference} | ${r.target} | ${r.met === undefined ? '-' : r.met ? 'yes' : '**no**'} |`)].join('\n');
}

export function writeResults(rows: BenchRow[], notes: string[], quick: boolean, profileDir: string | undefined): void {
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const header = [
    `## ${new Date().toISOString().slice(0, 10)} — ${cpus().length} × ${cpu}, ${(totalmem() / 1024 ** 3).toFixed(0)} GiB, Node ${process.version}${quick ? ' (--quick)' : ''}`,
    '',
    table(rows),
    '',
    ...notes.map((n) => `- ${n}`),
    '',
  ].join('\n');
  process.stdout.write(`${header}\n`);
  if (profileDir) {
    process.stderr.write(`profiled run: not written to bench/RESULTS.md; profiles in ${resolve(profileDir)}\n`);
    return;
  }
  const results = join(REPO_ROOT, 'bench/RESULTS.md');
  if (!existsSync(results)) {
    mkdirSync(join(REPO_ROOT, 'bench'), { recursive: true });
    writeFileSync(results, '# Benchmark results\n\nWritten by `npm run bench` (bench/run.ts); newest run last. What each figure measures and what was changed when one missed is under "Notes".\n\n');
  }
  appendFileSync(results, `${header}\n`);
}
