/**
 * Two builds of the agent, A and B, measured in turns on the same N sim
 * shards beside one steady floor (bench/steady-floor.mjs), for a change to
 * the agent's steady cost (figure 16's CPU) judged before and after in the
 * same minutes: a figure 16 run takes 6 minutes and measures each build
 * once, at whatever load the machine has then; here each turn is one window
 * of W seconds, the builds alternate, and every window is a ratio to the
 * floor measured over the same seconds.
 *
 * The engines are started once by A's agent; each turn stops the agent
 * (SIGTERM: engines keep running) and starts the other build, which adopts
 * them, waits until every shard is READY again and one health interval has
 * passed, then measures.
 *
 *   npx tsx bench/steady-ab.ts <A bin/run.js> <B bin/run.js> [shards=64] [window s=40] [turns=6]
 */
import { join } from 'node:path';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { execa, type ResultPromise } from 'execa';
import { type AgentMessage, ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { FAKE_NVIDIA_SMI, agentConfigYaml } from '../test/helpers/agent-config-yaml.js';
import { isRegister, shardIs, simStart } from '../test/helpers/sim-shards.js';
import { cleanup, controlPlane, cpuSeconds, freePort, newRoot, rssMb, sleep, spawnSteadyFloor, unitNodeOptions } from './bench-support.js';
import { writeFakeBox } from './big-node-figure.js';

const [binA, binB, nArg, wArg, tArg] = process.argv.slice(2);
if (!binA || !binB) {
  process.stderr.write('usage: npx tsx bench/steady-ab.ts <A bin/run.js> <B bin/run.js> [shards] [window s] [turns]\n');
  process.exit(2);
}
const n = Number(nArg ?? 64);
const windowS = Number(wArg ?? 40);
const turns = Number(tArg ?? 6);

const { cp, url } = await controlPlane();
const dirs = newRoot(`ab-${n}`);
const box = writeFakeBox(join(dirs.root, 'gpus'), n);
const config = join(dirs.root, 'agent.yaml');
writeFileSync(
  config,
  agentConfigYaml({ server: url, dirs, heartbeat: '1s', foreignMemoryShare: '100%' })
    .replace('log_level: debug', 'log_level: warn')
    .replace(/^ {2}health_interval: .*$/m, '  health_interval: 10s')
    .replace(/^ {2}worker_settle: .*$/m, '  worker_settle: 10s')
    .replace(/^ {2}stop_grace: .*$/m, '  stop_grace: 3s'),
);

let agent: ResultPromise | undefined;
const profileDir = process.env.LLMGW_AB_CPU_PROF;
function startAgent(bin: string): ResultPromise {
  const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  return execa(process.execPath, [...prof, bin, 'agent', 'run', '--config', config], {
    reject: false,
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'ignore',
    env: { LLMGW_FAKE_GPUS: box, NODE_OPTIONS: unitNodeOptions() },
  });
}

/** CPU seconds by thread name (summed over threads of one name). */
function threadCpu(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(comm, (out.get(comm) ?? 0) + (Number(f[11]) + Number(f[12])) / 100);
    } catch {}
  }
  return out;
}

const ids = Array.from({ length: n }, (_, i) => `s${i}`);
const ports: number[] = [];
for (let i = 0; i < n; i++) ports.push(await freePort());
const allReady = () => Promise.all(ids.map((id) => cp.waitFor('node-a', shardIs(id, ShardState.READY), 300_000)));

try {
  agent = startAgent(binA);
  await cp.waitFor('node-a', isRegister, 30_000);
  const ready = allReady();
  for (const [i, id] of ids.entries()) cp.send('node-a', { case: 'start', value: simStart(id, ports[i] as number, { gpu: i, args: ['--load-time', '0s'] }) });
  await ready;
  const floorRegistered = cp.waitFor('steady-floor', isRegister, 30_000);
  const floor = spawnSteadyFloor(url, 'steady-floor', dirs, ports, FAKE_NVIDIA_SMI, box);
  await floorRegistered;
  const rows: string[] = [];
  for (let t = 0; t < turns; t++) {
    const which = t % 2 === 0 ? 'A' : 'B';
    if (t > 0) {
      agent?.kill('SIGTERM');
      await agent;
      // Adopted shards come back READY in Register's running shards or in statuses after it.
      const ready = new Set<string>();
      const onMessage = (nodeId: string, m: AgentMessage) => {
        if (nodeId !== 'node-a') return;
        if (m.msg.case === 'register') for (const s of m.msg.value.runningShards) if (s.state === ShardState.READY) ready.add(s.shardId);
        if (m.msg.case === 'shard' && m.msg.value.state === ShardState.READY) ready.add(m.msg.value.shardId);
      };
      cp.on('message', onMessage);
      agent = startAgent(which === 'A' ? binA : binB);
      for (const until = Date.now() + 180_000; ready.size < n && Date.now() < until; ) await sleep(500);
      cp.off('message', onMessage);
      if (ready.size < n) process.stderr.write(`turn ${t}: only ${ready.size} of ${n} shards READY again\n`);
    }
    await sleep(Number(process.env.LLMGW_AB_SETTLE_S ?? 12) * 1000);
    const pid = agent?.pid as number;
    // LLMGW_AB_PERF_DIR: `perf record` of the agent over the window, one file a turn (perf report -i).
    const perfDir = process.env.LLMGW_AB_PERF_DIR;
    const perf = perfDir ? execa('perf', ['record', '-F', '499', '-g', '-p', String(pid), '-o', join(perfDir, `turn${t}-${which}.data`), '--', 'sleep', String(windowS)], { reject: false, stdio: 'ignore' }) : undefined;
    const t0 = threadCpu(pid);
    const a0 = cpuSeconds(pid);
    const f0 = cpuSeconds(floor.pid);
    let rss = 0;
    // Every 10 s of the window, agent / floor CPU: a transient (the minutes after READY) shows as a trend.
    let [sa, sf] = [a0, f0];
    const slices: string[] = [];
    for (let s = 1; s <= windowS; s++) {
      await sleep(1000);
      rss = Math.max(rss, rssMb(pid));
      if (s % 10 !== 0) continue;
      const [na, nf] = [cpuSeconds(pid), cpuSeconds(floor.pid)];
      slices.push(`${((na - sa) * 1000).toFixed(0)}/${((nf - sf) * 1000).toFixed(0)}`);
      [sa, sf] = [na, nf];
    }
    const a = cpuSeconds(pid) - a0;
    await perf;
    const t1 = threadCpu(pid);
    const threads = [...t1].map(([k, v]) => `${k} ${((v - (t0.get(k) ?? 0)) * 1000).toFixed(0)}`).join(', ');
    process.stderr.write(`  threads (ms): ${threads}\n`);
    const f = cpuSeconds(floor.pid) - f0;
    const load = (await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
    const row = `${which} ${n} shards ${windowS} s: agent ${(a * 1000).toFixed(0)} ms, floor ${(f * 1000).toFixed(0)} ms, ${(a / f).toFixed(2)}x, rss max ${rss.toFixed(1)} MB, load ${load}; per 10 s agent/floor ms: ${slices.join(' ')}`;
    rows.push(row);
    process.stderr.write(`${row}\n`);
  }
  process.stdout.write(`${rows.join('\n')}\n`);
} finally {
  agent?.kill('SIGTERM');
  await Promise.race([agent, sleep(5000)]);
  agent?.kill('SIGKILL');
  await cleanup();
  await cp.close().catch(() => undefined);
}
process.exit(0);
