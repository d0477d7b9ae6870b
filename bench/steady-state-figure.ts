/**
 * Figure 5: the agent in steady state with 8 shards and a 1 s heartbeat.
 * 5a its RSS (with PSS and USS) beside an idle node; 5b its CPU beside its
 * floor (bench/steady-floor.mjs) measured beside it in the same run; 5c its
 * memory trend over 100,000 heartbeats (10,000 with --quick).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { FAKE_NVIDIA_SMI } from '../test/helpers/agent-config-yaml.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import { controlPlane, cpuSeconds, median, newRoot, rssMb, sleep, spawnAgent, spawnSteadyFloor, startShards, unitNodeOptions } from './bench-support.js';
import type { BenchRow } from './fleet-figure.js';

export async function steadyStateFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const idle = spawnSync(process.execPath, ['-e', 'setTimeout(()=>{console.log(require("fs").readFileSync("/proc/self/status","utf8").match(/VmRSS:\\s+(\\d+)/)[1])},1500);setInterval(()=>{},1000)'], { encoding: 'utf8', timeout: 5000 });
  const idleMb = Number(idle.stdout.trim()) / 1024;

  const { cp, url } = await controlPlane();
  const dirs = newRoot('f5');
  const agent = spawnAgent(url, dirs, { heartbeat: '1s' });
  await cp.waitFor('node-a', isRegister, 30_000);
  const { ports } = await startShards(cp, 'node-a', 8);
  // 5b's floor (bench/steady-floor.mjs): the same probes of the same 8
  // engines, heartbeats on the same control plane and hardware reads, run
  // beside the agent so that both pay the same minute of the machine.
  const floorRegistered = cp.waitFor('steady-floor', isRegister, 30_000);
  const floor = spawnSteadyFloor(url, 'steady-floor', dirs, ports, FAKE_NVIDIA_SMI);
  await floorRegistered;
  await sleep(2000);
  const seconds = quick ? 15 : 60;
  // The agent's GPU memory loop (here the fake nvidia-smi, a Node process)
  // is a cost of the agent too, though not in its own CPU time: noted apart.
  const loop = spawnSync('pgrep', ['-P', String(agent.pid), '-f', 'loop-ms'], { encoding: 'utf8' }).stdout.trim().split('\n').map(Number)[0];
  const cpu0 = cpuSeconds(agent.pid);
  const floorCpu0 = cpuSeconds(floor.pid);
  const loopCpu0 = loop ? cpuSeconds(loop) : 0;
  const load0 = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const samples: number[] = [];
  const pss: number[] = [];
  const uss: number[] = [];
  // Rounds of 10 s, each agent and floor CPU read back to back (the order
  // alternating round by round), so the notes show how the ratio moves with load.
  const rounds: { agent: number; floor: number; load: string }[] = [];
  let roundAgent = cpu0;
  let roundFloor = floorCpu0;
  for (let i = 1; i <= seconds; i++) {
    await sleep(1000);
    samples.push(rssMb(agent.pid));
    const m = memoryKinds(agent.pid);
    pss.push(m.pss);
    uss.push(m.uss);
    if (i % 10 === 0 || i === seconds) {
      let a: number;
      let f: number;
      if (rounds.length % 2 === 0) {
        a = cpuSeconds(agent.pid);
        f = cpuSeconds(floor.pid);
      } else {
        f = cpuSeconds(floor.pid);
        a = cpuSeconds(agent.pid);
      }
      rounds.push({ agent: a - roundAgent, floor: f - roundFloor, load: readFileSync('/proc/loadavg', 'utf8').split(' ')[0] as string });
      roundAgent = a;
      roundFloor = f;
    }
  }
  const cpuPct = ((cpuSeconds(agent.pid) - cpu0) / seconds) * 100;
  const floorPct = ((cpuSeconds(floor.pid) - floorCpu0) / seconds) * 100;
  const load1 = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const memory = memoryKinds(agent.pid);
  notes.push(
    `5a of the agent's RSS at the end: ${memory.sharedClean.toFixed(1)} MB clean file pages shared with every other node process (the node binary and its libraries), ${memory.anonymous.toFixed(1)} MB of its own (heap, stacks); PSS ${memory.pss.toFixed(1)} MB, USS ${memory.uss.toFixed(1)} MB (max over the run: PSS ${Math.max(...pss).toFixed(1)} MB, USS ${Math.max(...uss).toFixed(1)} MB); NODE_OPTIONS ${JSON.stringify(unitNodeOptions())}`,
  );
  if (loop) notes.push(`5b the nvidia-smi loop beside the agent (the fake, a Node process): ${(((cpuSeconds(loop) - loopCpu0) / seconds) * 100).toFixed(2)} % CPU`);
  const maxRss = Math.max(...samples);
  rows.push({
    figure: `5a agent RSS over ${seconds} s, 8 shards, heartbeat 1 s`,
    measured: `max ${maxRss.toFixed(1)} MB (PSS max ${Math.max(...pss).toFixed(1)} MB, USS max ${Math.max(...uss).toFixed(1)} MB)`,
    reference: `idle node: ${idleMb.toFixed(1)} MB`,
    target: '<= 70 MB',
    met: maxRss <= 70,
  });
  // Issue 29: an absolute percentage does not hold across machines (0.38–0.52 %
  // here, 0.88–1.32 % on another EPYC); the ratio to the floor measured beside it does.
  const ratio = cpuPct / floorPct;
  rows.push({
    figure: `5b agent CPU over ${seconds} s, 8 shards, beside its floor (bench/steady-floor.mjs: the same probes, heartbeats and hardware reads)`,
    measured: `${cpuPct.toFixed(2)} % (${ratio.toFixed(2)}x floor)`,
    reference: `floor: ${floorPct.toFixed(2)} %; load ${load0} → ${load1}`,
    target: '<= 1.3x floor',
    met: ratio <= 1.3,
  });
  notes.push(
    `5b per 10 s round, agent / floor CPU ms (ratio, 1-min load): ${rounds.map((r) => `${(r.agent * 1000).toFixed(0)} / ${(r.floor * 1000).toFixed(0)} (${(r.agent / r.floor).toFixed(2)}x, ${r.load})`).join('; ')}`,
  );

  // Memory over many heartbeats (issue 52: 100,000): as fast as the agent
  // sends them, RSS and the process's anonymous memory (the V8 heap and
  // malloc's, without the binary's shared pages) read at each twentieth.
  const beats = quick ? 10_000 : 100_000;
  const { cp: cp2, url: url2 } = await controlPlane();
  const dirs2 = newRoot('f5b');
  const fast = spawnAgent(url2, dirs2, { heartbeat: '1ms' });
  await cp2.waitFor('node-a', isRegister, 30_000);
  const marks: number[] = [];
  const anon: number[] = [];
  let seen = 0;
  const began = performance.now();
  await new Promise<void>((resolve) => {
    cp2.on('message', (_n, m) => {
      if (m.msg.case !== 'heartbeat') return;
      seen++;
      if (seen % (beats / 20) === 0) {
        marks.push(rssMb(fast.pid));
        anon.push(memoryKinds(fast.pid).anonymous);
      }
      if (seen >= beats) resolve();
    });
  });
  const tookS = (performance.now() - began) / 1000;
  // The first tenth is start-up (code compiled, caches filled); the trend is over the rest.
  const firstHalf = median(marks.slice(2, 11));
  const secondHalf = median(marks.slice(11));
  const growth = secondHalf - firstHalf;
  const slope = slopePer(anon.slice(2), beats / 20) * 10_000;
  rows.push({
    figure: `5c agent memory over ${beats} heartbeats (${(beats / tookS).toFixed(0)} a second)`,
    measured: `RSS ${(marks.at(-1) as number).toFixed(1)} MB (trend ${growth >= 0 ? '+' : ''}${growth.toFixed(1)} MB between halves); anonymous ${(anon.at(-1) as number).toFixed(1)} MB, fitted ${slope >= 0 ? '+' : ''}${slope.toFixed(2)} MB a 10,000`,
    reference: `idle node: ${idleMb.toFixed(1)} MB`,
    target: 'no growth trend',
    met: growth < 1 && slope < 0.1,
  });
  notes.push(`5c at each twentieth of the heartbeats: RSS (MB) ${marks.map((x) => x.toFixed(1)).join(', ')}; anonymous (MB) ${anon.map((x) => x.toFixed(1)).join(', ')}`);
}

/** The least-squares slope of `ys` sampled every `step` (per unit of step). */
function slopePer(ys: number[], step: number): number {
  const n = ys.length;
  if (n < 2) return 0;
  const xs = ys.map((_, i) => i * step);
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += ((xs[i] as number) - mx) * ((ys[i] as number) - my);
    den += ((xs[i] as number) - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/**
 * Where a process's resident memory is, from /proc/<pid>/smaps_rollup, in MB.
 * PSS charges each shared page to the processes sharing it in equal parts;
 * USS is only the pages no other process maps (what killing it would free).
 * Most of an agent's RSS is the node binary's pages, which every node process
 * on the machine shares.
 */
function memoryKinds(pid: number): { sharedClean: number; anonymous: number; pss: number; uss: number } {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN);
  return {
    sharedClean: kb('Shared_Clean') / 1024,
    anonymous: kb('Anonymous') / 1024,
    pss: kb('Pss') / 1024,
    uss: (kb('Private_Clean') + kb('Private_Dirty')) / 1024,
  };
}
