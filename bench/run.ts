/**
 * `npm run bench`: the figures of issue 8, each measured side by side with its
 * reference in the same run, printed as a table and written with the machine,
 * Node version and date to bench/RESULTS.md.
 *
 *   npx tsx bench/run.ts [--quick] [--only 1,3,9] [--cpu-prof DIR]
 *
 * --quick shortens the long figures (5: 15 s instead of 60 s, 10,000 instead
 * of 100,000 heartbeats; 16: 20 s instead of 60 s at each shard count; 8: 96 instead of 500 shards; 12 and 13: 2 stops and
 * 3 starts per engine instead of 5 and 10; 14: 3 pull rounds instead of 7,
 * 2 wakes instead of 3; 14d-spread, -sleep, -compile: 20 starts or wakes a rung instead of 50)
 * for a trial run.
 * --cpu-prof runs every agent under `node --cpu-prof`, writing .cpuprofile
 * files to DIR (open them in Chrome DevTools); such a run's figures are
 * printed but not written to RESULTS.md, as profiling slows the agent.
 *
 * The figures are named in bench/figures.ts, each measured in its own module;
 * the table and RESULTS.md are written by bench/results-writer.ts.
 */
import { resolve } from 'node:path';
import { cleanup, profileAgentsInto } from './bench-support.js';
import { benchFigures } from './figures.js';
import type { BenchRow } from './fleet-figure.js';
import { writeResults } from './results-writer.js';

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const onlyArg = args[args.indexOf('--only') + 1];
const only = args.includes('--only') && onlyArg ? new Set(onlyArg.split(',')) : undefined;
const profileDir = args.includes('--cpu-prof') ? args[args.indexOf('--cpu-prof') + 1] : undefined;
if (args.includes('--cpu-prof') && (!profileDir || profileDir.startsWith('--'))) {
  process.stderr.write('error: --cpu-prof needs a directory, e.g. --cpu-prof /tmp/prof\n');
  process.exit(2);
}
if (profileDir) profileAgentsInto(resolve(profileDir));
const rows: BenchRow[] = [];
const notes: string[] = [];
const FIGURES = benchFigures(rows, notes, quick);

async function main(): Promise<void> {
  process.on('SIGINT', () => void cleanup().then(() => process.exit(130)));
  for (const [n, fn] of Object.entries(FIGURES)) {
    if (only && !only.has(n)) continue;
    process.stderr.write(`figure ${n}…\n`);
    try {
      await fn();
    } catch (err) {
      rows.push({ figure: `${n} (did not complete)`, measured: String(err instanceof Error ? err.message : err), reference: '-', target: '-', met: false });
    } finally {
      await cleanup();
    }
  }
  writeResults(rows, notes, quick, profileDir);
}

await main();
