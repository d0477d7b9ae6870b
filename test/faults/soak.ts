/**
 * The fault campaign, many times over: `npm run soak -- --count 20`.
 *
 * Runs every scenario of test/faults/scenarios `--count` times (two at a
 * time, as vitest runs test files on the 2-core machines this targets) and
 * writes test/faults/RESULTS.md: per scenario, the runs, the failures, the
 * processes leaked and the requests or reports lost, with the machine,
 * Node version and date.
 *
 *   --count N        runs per scenario (default 20; the agent-kill scenarios run 2.5 times that)
 *   --only REGEX     scenarios whose name matches
 *   --parallel N     scenarios at a time (default 2)
 *   --out FILE       where the table goes (default test/faults/RESULTS.md)
 */
import { writeFileSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { allScenarios } from './scenarios/all-scenarios.js';
import { type Scenario, runScenario } from './scenarios/fault-harness.js';

const { values } = parseArgs({
  options: {
    count: { type: 'string', default: '20' },
    only: { type: 'string' },
    parallel: { type: 'string', default: '2' },
    out: { type: 'string', default: fileURLToPath(new URL('RESULTS.md', import.meta.url)) },
  },
});
const count = Number(values.count);
const parallel = Number(values.parallel);
if (!Number.isInteger(count) || count < 1) throw new Error(`--count ${values.count} is not a positive integer`);
if (!Number.isInteger(parallel) || parallel < 1) throw new Error(`--parallel ${values.parallel} is not a positive integer`);
const only = values.only ? new RegExp(values.only) : undefined;
const scenarios = allScenarios.filter((s) => !only || only.test(s.name));

interface Tally {
  runs: number;
  failures: number;
  leaked: number;
  dataLost: number;
  totalMs: number;
  hits: Map<string, number>;
  errors: string[];
}

const tallies = new Map<string, Tally>(
  scenarios.map((s) => [s.name, { runs: 0, failures: 0, leaked: 0, dataLost: 0, totalMs: 0, hits: new Map(), errors: [] }]),
);

// Interleaved, so that two runs of one scenario rarely share the machine.
const queue: Scenario[] = [];
const runsOf = (s: Scenario) => Math.round(count * (s.soakWeight ?? 1));
const rounds = Math.max(...scenarios.map(runsOf));
for (let i = 0; i < rounds; i++) queue.push(...scenarios.filter((s) => i < runsOf(s)));
const total = queue.length;
let done = 0;
const startedMs = Date.now();

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<T>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms); })]);
  } finally {
    clearTimeout(timer);
  }
}

async function worker(): Promise<void> {
  for (let s = queue.shift(); s; s = queue.shift()) {
    const t = tallies.get(s.name) as Tally;
    const t0 = Date.now();
    let line: string;
    try {
      const { outcome, leaked } = await withTimeout(runScenario(s), s.timeoutMs * 2, s.name);
      t.leaked += leaked;
      t.dataLost += outcome.dataLost;
      if (outcome.hit) t.hits.set(outcome.hit.replace(/\d+/g, 'N'), (t.hits.get(outcome.hit.replace(/\d+/g, 'N')) ?? 0) + 1);
      line = outcome.dataLost > 0 ? `lost ${outcome.dataLost}` : 'ok';
    } catch (err) {
      t.failures++;
      const msg = err instanceof Error ? err.message : String(err);
      t.leaked += (err as { leaked?: number }).leaked ?? 0;
      t.errors.push(msg.split('\n')[0] ?? msg);
      line = `FAILED: ${msg.split('\n')[0]}`;
    }
    t.runs++;
    t.totalMs += Date.now() - t0;
    done++;
    process.stderr.write(`[${done}/${total}] ${s.name} ${((Date.now() - t0) / 1000).toFixed(1)}s ${line}\n`);
  }
}

await Promise.all(Array.from({ length: parallel }, () => worker()));
const wallS = (Date.now() - startedMs) / 1000;

const rows = scenarios.map((s) => {
  const t = tallies.get(s.name) as Tally;
  const notes = [...t.hits].map(([k, v]) => `${k} ×${v}`).join('; ');
  return `| ${s.name} | ${t.runs} | ${t.failures} | ${t.leaked} | ${t.dataLost} | ${(t.totalMs / Math.max(t.runs, 1) / 1000).toFixed(1)} s | ${notes} |`;
});
const sum = (k: 'runs' | 'failures' | 'leaked' | 'dataLost') => [...tallies.values()].reduce((a, t) => a + t[k], 0);
const failures = [...tallies].flatMap(([name, t]) => t.errors.map((e) => `- ${name}: ${e}`));
const cpu = cpus();
const report = `# Fault campaign: soak results

Produced by \`npm run soak -- --count ${count}\`${only ? ` --only ${values.only}` : ''} (${parallel} scenarios at a time).
Scenarios: \`test/faults/scenarios/\`; the same scenarios run once each in \`npm test\` (\`test/faults/*.test.ts\`).

- Date: ${new Date().toISOString()}
- Machine: ${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Linux ${release()}
- Node: ${process.version}
- Wall time: ${(wallS / 60).toFixed(1)} min for ${total} runs

Every run asserts: no shard with two engines; no leaked process (nothing
left writing under the run's directories but engines of shards last
reported READY); no healthy engine killed (same pid, /health 200); every
shard ends READY, STOPPED on purpose, or FAILED with a reason. "Data lost"
counts inference requests that failed while the agent or control plane was
beaten on, and reports that never arrived.

| scenario | runs | failures | leaked processes | data lost | mean time | notes |
|---|---:|---:|---:|---:|---:|---|
${rows.join('\n')}
| **total** | **${sum('runs')}** | **${sum('failures')}** | **${sum('leaked')}** | **${sum('dataLost')}** | | |
${failures.length > 0 ? `\n## Failures\n\n${failures.join('\n')}\n` : ''}`;
writeFileSync(values.out as string, report);
process.stderr.write(`\nwrote ${values.out}: ${sum('runs')} runs, ${sum('failures')} failures, ${sum('leaked')} leaked, ${sum('dataLost')} lost, ${(wallS / 60).toFixed(1)} min\n`);
process.exit(sum('failures') + sum('leaked') + sum('dataLost') > 0 ? 1 : 0);
