/**
 * Where the agent's RSS is, with 8 sim shards (figure 5a's set-up): after
 * `seconds` of steady state, its RSS sampled each second (max), and at the
 * end /proc/PID/smaps grouped by mapping (anonymous, stacks, the node
 * binary, libraries), its threads by name, and their count.
 *   npx tsx bench/rss-probe.ts [seconds] [shards]
 * Levers to try without editing the unit: LLMGW_BENCH_NODE_OPTIONS (replaces
 * the unit's NODE_OPTIONS) and LLMGW_PROBE_ENV (JSON, more of the agent's env).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { isRegister } from '../test/helpers/sim-shards.js';
import { cleanup, controlPlane, newRoot, rssMb, sleep, spawnAgent, startShards, unitNodeOptions } from './bench-support.js';

export function smapsByMapping(pid: number): Map<string, { rss: number; anon: number; count: number }> {
  const out = new Map<string, { rss: number; anon: number; count: number }>();
  let name = '';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      name = head[1] || '[anon]';
      continue;
    }
    const kv = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (!kv) continue;
    const e = out.get(name) ?? { rss: 0, anon: 0, count: 0 };
    if (kv[1] === 'Rss') {
      e.rss += Number(kv[2]);
      e.count++;
    } else e.anon += Number(kv[2]);
    out.set(name, e);
  }
  return out;
}

async function main(): Promise<void> {
  const seconds = Number(process.argv[2] ?? 30);
  const shards = Number(process.argv[3] ?? 8);
  const env = JSON.parse(process.env.LLMGW_PROBE_ENV ?? '{}') as Record<string, string>;
  const { cp, url } = await controlPlane();
  const dirs = newRoot('rss');
  const agent = spawnAgent(url, dirs, { heartbeat: '1s', env });
  await cp.waitFor('node-a', isRegister, 30_000);
  await startShards(cp, 'node-a', shards);
  await sleep(2000);
  const samples: number[] = [];
  for (let i = 0; i < seconds; i++) {
    await sleep(1000);
    samples.push(rssMb(agent.pid));
  }
  const rollup = readFileSync(`/proc/${agent.pid}/smaps_rollup`, 'utf8');
  const tasks = readdirSync(`/proc/${agent.pid}/task`).map((t) => readFileSync(`/proc/${agent.pid}/task/${t}/comm`, 'utf8').trim());
  const by = [...smapsByMapping(agent.pid)].sort((a, b) => b[1].rss - a[1].rss).slice(0, 12);
  console.log(`NODE_OPTIONS ${JSON.stringify(unitNodeOptions())} env ${JSON.stringify(env)} load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
  console.log(`RSS max ${Math.max(...samples).toFixed(1)} MB, last ${samples.at(-1)?.toFixed(1)} MB`);
  console.log(rollup.split('\n').filter((l) => /^(Rss|Pss|Shared_Clean|Private_Clean|Private_Dirty|Anonymous):/.test(l)).join('; '));
  console.log(`threads ${tasks.length}: ${tasks.join(', ')}`);
  for (const [n, e] of by) console.log(`  ${(e.rss / 1024).toFixed(1).padStart(6)} MB rss ${(e.anon / 1024).toFixed(1).padStart(6)} MB anon ×${e.count} ${n}`);
  if (process.env.LLMGW_PROBE_HOLD) {
    console.log(`holding agent pid ${agent.pid} for ${process.env.LLMGW_PROBE_HOLD} s`);
    await sleep(Number(process.env.LLMGW_PROBE_HOLD) * 1000);
  }
}

for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void cleanup().finally(() => process.exit(130)));

main()
  .catch((err) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(() => cleanup());
