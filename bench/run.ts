/**
 * `npm run bench`: the figures of issue 8, each measured side by side with its
 * reference in the same run, printed as a table and written with the machine,
 * Node version and date to bench/RESULTS.md.
 *
 *   npx tsx bench/run.ts [--quick] [--only 1,3,9] [--cpu-prof DIR]
 *
 * --quick shortens the long figures (5: 15 s instead of 60 s, 2,000 instead
 * of 10,000 heartbeats; 8: 96 instead of 500 shards; 12 and 13: 2 stops and
 * 3 starts per engine instead of 5 and 10; 14: 3 pull rounds instead of 7,
 * 2 wakes instead of 3) for a trial run.
 * --cpu-prof runs every agent under `node --cpu-prof`, writing .cpuprofile
 * files to DIR (open them in Chrome DevTools); such a run's figures are
 * printed but not written to RESULTS.md, as profiling slows the agent.
 */
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import { ShardState, StopShardSchema } from '../src/gen/llmgw/v1/agent_pb.js';
import { Supervisor } from '../src/agent/supervisor/supervisor.js';
import { BIN, REPO_ROOT } from '../test/helpers/run-cli.js';
import { FAKE_NVIDIA_SMI, FIXTURE_SYSFS } from '../test/helpers/agent-config-yaml.js';
import { isRegister, shardIs, simStart } from '../test/helpers/sim-shards.js';
import { bootLab, labUnavailableReason } from '../test/helpers/systemd-lab.js';
import {
  cleanup,
  profileAgentsInto,
  controlPlane,
  cpuSeconds,
  median,
  newRoot,
  rssMb,
  sleep,
  unitNodeOptions,
  spawnAgent,
  spawnSteadyFloor,
  startShards,
  freePort,
} from './bench-support.js';
import { deathAtRandomFigure } from './death-at-random-figure.js';
import { readyAfterAnswerFigure, stopDrainFigure } from './engine-behaviour-figures.js';
import { fleetFigure } from './fleet-figure.js';
import { floorFigures } from './floor-figures.js';
import { readinessFigure } from './readiness-figure.js';
import { warmStartFigures } from './warm-start-figures.js';
import { parseStartShard } from '../src/lib/shard-id.js';

interface Row {
  figure: string;
  measured: string;
  reference: string;
  target: string;
  met: boolean | undefined;
}

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
const rows: Row[] = [];
const notes: string[] = [];

const ms = (x: number) => `${x.toFixed(0)} ms`;
const CTL_FLOOR = fileURLToPath(new URL('./ctl-floor.mjs', import.meta.url));

function timeCommand(argv: string[], runs: number): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const r = spawnSync(argv[0] as string, argv.slice(1), { stdio: 'ignore' });
    times.push(performance.now() - t0);
    if (r.status !== 0 && !argv.includes('ctl')) throw new Error(`${argv.join(' ')} exited ${r.status}`);
  }
  return median(times);
}

/** Alternates the commands run by run, so load on a shared machine falls on both alike. */
function timeSideBySide(cmds: string[][], runs: number): number[] {
  const times: number[][] = cmds.map(() => []);
  for (let i = 0; i < runs; i++) {
    for (const [j, c] of cmds.entries()) (times[j] as number[]).push(timeCommand(c, 1));
  }
  return times.map(median);
}

async function fig1(): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f1');
  spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  await sleep(300);
  const node = process.execPath;
  const [base, version, status, statusJson, floor] = timeSideBySide(
    [
      [node, '-e', '0'],
      [node, BIN, '--version'],
      [node, BIN, 'ctl', 'status', '--socket', dirs.socket],
      [node, BIN, 'ctl', 'status', '--json', '--socket', dirs.socket],
      [node, CTL_FLOOR, dirs.socket],
    ],
    quick ? 8 : 20,
  ) as [number, number, number, number, number];
  rows.push({ figure: '1a cold start `llmgw --version`', measured: ms(version), reference: `node -e 0: ${ms(base)}`, target: '<= 2.5x', met: version / base <= 2.5 });
  rows[rows.length - 1]!.measured += ` (${(version / base).toFixed(2)}x)`;
  rows.push({ figure: '1b cold start `llmgw ctl status`', measured: `${ms(status)} (${(status / base).toFixed(2)}x)`, reference: `node -e 0: ${ms(base)}`, target: '<= 1.3x', met: status / base <= 1.3 });
  rows.push({
    figure: '1c cold start `llmgw ctl status --json` beside its floor (bench/ctl-floor.mjs: one Status call, HTTP/1.1 on node:net alone)',
    measured: `${ms(statusJson)} (${(statusJson / base).toFixed(2)}x node, ${(statusJson / floor).toFixed(2)}x floor)`,
    reference: `floor: ${ms(floor)} (${(floor / base).toFixed(2)}x node)`,
    target: 'recorded',
    met: undefined,
  });
}

async function adoptedReady(n: number, rounds: number): Promise<number[]> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot(`f2-${n}`);
  let agent = spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  const { ids } = await startShards(cp, 'node-a', n);
  const results: number[] = [];
  for (let r = 0; r < rounds; r++) {
    agent.kill('SIGKILL');
    await agent.exited;
    const pending = new Set(ids);
    let doneAt = 0;
    const done = new Promise<void>((resolve) => {
      const onMessage = (nodeId: string, m: import('../src/gen/llmgw/v1/agent_pb.js').AgentMessage) => {
        if (nodeId !== 'node-a') return;
        if (m.msg.case === 'register') {
          for (const s of m.msg.value.runningShards) if (s.state === ShardState.READY) pending.delete(s.shardId);
        } else if (m.msg.case === 'shard' && m.msg.value.state === ShardState.READY) {
          pending.delete(m.msg.value.shardId);
        }
        if (pending.size === 0) {
          doneAt = Date.now();
          cp.off('message', onMessage);
          resolve();
        }
      };
      cp.on('message', onMessage);
    });
    agent = spawnAgent(url, dirs);
    await done;
    results.push(doneAt - agent.spawnedAtMs);
  }
  return results;
}

async function fig2(): Promise<void> {
  // Reference: the engine's own /health latency.
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f2ref');
  spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  const { ports } = await startShards(cp, 'node-a', 1);
  const lat: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    await fetch(`http://127.0.0.1:${ports[0]}/health`);
    lat.push(performance.now() - t0);
  }
  const ref = `sim /health: ${median(lat).toFixed(1)} ms`;
  const one = median(await adoptedReady(1, 3));
  rows.push({ figure: '2a agent start → READY, 1 adopted shard', measured: ms(one), reference: ref, target: '<= 1.0 s', met: one <= 1000 });
  const eight = median(await adoptedReady(8, 3));
  rows.push({ figure: '2b agent start → READY, 8 adopted shards', measured: ms(eight), reference: ref, target: '<= 1.5 s', met: eight <= 1500 });
}

async function deathReport(adopted: boolean, rounds: number): Promise<number[]> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot(`f3-${adopted}`);
  let agent = spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  const out: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const id = `d${r}`;
    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs(id, ShardState.READY), 60_000);
    cp.send('node-a', { case: 'start', value: simStart(id, port, { args: ['--load-time', '0s'] }) });
    let pid = ((await ready).msg.value as { pid: number }).pid;
    if (adopted) {
      agent.kill('SIGKILL');
      await agent.exited;
      const again = cp.waitFor('node-a', (m) => shardIs(id, ShardState.READY)(m) || (m.msg.case === 'register' && m.msg.value.runningShards.some((s) => s.shardId === id && s.state === ShardState.READY)), 60_000);
      agent = spawnAgent(url, dirs);
      const m = await again;
      pid = m.msg.case === 'register' ? (m.msg.value.runningShards.find((s) => s.shardId === id)?.pid ?? pid) : pid;
    }
    const dead = cp.waitFor('node-a', shardIs(id, ShardState.FAILED, ShardState.EXITED), 30_000);
    const t0 = Date.now();
    process.kill(pid, 'SIGKILL');
    await dead;
    out.push(Date.now() - t0);
    const stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 30_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
    await stopped;
  }
  return out;
}

async function fig3(): Promise<void> {
  const own = median(await deathReport(false, 5));
  rows.push({ figure: '3a engine SIGKILL → FAILED on the stream, own child', measured: ms(own), reference: '-', target: '<= 100 ms', met: own <= 100 });
  const adopted = median(await deathReport(true, 5));
  // Issue 18: an adopted engine's death as fast as a child's, through its pidfd.
  rows.push({ figure: '3b engine SIGKILL → FAILED on the stream, adopted', measured: ms(adopted), reference: `${ms(own)} (3a)`, target: '<= 50 ms', met: adopted <= 50 });
  // Issue 29: the same death at random moments after Register, while the agent's first hardware reads run.
  await cleanup();
  await deathAtRandomFigure(rows, notes, quick);
}

/**
 * The host pid of the process that is `labPid` in the lab whose PID 1 is
 * `labInit`, so the kill is sent from here at t0, with no nsenter in between.
 */
function hostPidOf(labInit: number, labPid: number): number {
  const ns = readlinkSync(`/proc/${labInit}/ns/pid`);
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/pid`) !== ns) continue;
      const nspid = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${name}/status`, 'utf8'))?.[1]?.trim().split(/\s+/);
      if (Number(nspid?.at(-1)) === labPid) return Number(name);
    } catch {
      // Gone while scanned.
    }
  }
  throw new Error(`no process is pid ${labPid} in the lab`);
}

/** Figure 3a's measurement, with the agent under a real systemd (the lab) and launcher auto: each engine in its own unit. */
async function unitDeathReport(rounds: number): Promise<number[]> {
  const why = await labUnavailableReason();
  if (why) throw new Error(why);
  const dirs = newRoot('f10');
  const lab = await bootLab({ logFile: join(dirs.root, 'systemd-lab-boot.log') });
  try {
    const { cp, url } = await controlPlane();
    spawnAgent(url, dirs, { prefix: ['nsenter', '-t', String(lab.pid), '-m', '-p', '--'] });
    await cp.waitFor('node-a', isRegister, 30_000);
    const out: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const id = `u${r}`;
      const ready = cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
      cp.send('node-a', { case: 'start', value: simStart(id, await freePort(), { args: ['--load-time', '0s'] }) });
      const st = (await ready).msg.value as { pid: number; state: ShardState; error: string };
      if (st.state !== ShardState.READY) throw new Error(`shard ${id} did not start: ${st.error}`);
      if ((await lab.show(`llmgw-shard-${id}.service`, 'MainPID')) !== String(st.pid)) throw new Error(`shard ${id} is not in its own unit: is the launcher systemd-run?`);
      const hostPid = hostPidOf(lab.pid, st.pid);
      const dead = cp.waitFor('node-a', shardIs(id, ShardState.FAILED, ShardState.EXITED), 30_000);
      const t0 = Date.now();
      process.kill(hostPid, 'SIGKILL');
      const m = (await dead).msg.value as { error: string };
      out.push(Date.now() - t0);
      if (!m.error.includes('recorded by systemd')) throw new Error(`the death of ${id} was not read from systemd: ${m.error}`);
    }
    return out;
  } finally {
    await lab.stop();
  }
}

async function fig10(): Promise<void> {
  const direct = median(await deathReport(false, 5));
  rows.push({ figure: '10a engine SIGKILL → FAILED on the stream, direct launcher (own child)', measured: ms(direct), reference: '-', target: '<= 300 ms', met: direct <= 300 });
  const unit = median(await unitDeathReport(5));
  rows.push({
    figure: '10b engine SIGKILL → FAILED on the stream, systemd-run launcher (its own unit; status read from systemd)',
    measured: ms(unit),
    reference: `${ms(direct)} (10a)`,
    target: '<= 300 ms',
    met: unit <= 300,
  });
}

/**
 * What an adopted engine's death costs to see through a pidfd
 * (src/lib/process/pidfd.ts), before the agent is wired to it: a process
 * that is not ours (a shell's background child, re-parented when the shell
 * exits) is killed, and the time to watchPidExit's callback taken.
 */
async function figPidfd(): Promise<void> {
  const { watchPidExit } = await import('../src/lib/process/pidfd.js');
  const times: number[] = [];
  for (let r = 0; r < (quick ? 10 : 30); r++) {
    const pid = Number(spawnSync('sh', ['-c', 'sleep 60 >/dev/null 2>&1 </dev/null & echo $!'], { encoding: 'utf8' }).stdout.trim());
    const controller = new AbortController();
    let t0 = 0;
    // The watch does not keep a process alive (an agent has its stream for
    // that); this timer does, and ends a watch that never fires.
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<number>((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`pidfd: the death of ${pid} not seen within 10 s`)), 10_000);
      const watch = watchPidExit(pid, controller.signal, () => resolve(performance.now() - t0));
      if (watch.kind !== 'watching') reject(new Error(`pidfd: ${watch.kind === 'unsupported' ? watch.reason : 'gone'}`));
    }).finally(() => clearTimeout(timer));
    t0 = performance.now();
    process.kill(pid, 'SIGKILL');
    times.push(await seen);
    controller.abort();
  }
  rows.push({
    figure: 'pidfd a non-child process SIGKILL → watchPidExit callback',
    measured: `${median(times).toFixed(1)} ms median, ${Math.max(...times).toFixed(1)} ms max`,
    reference: '/proc poll every 500 ms: 250 ms on average',
    target: '<= 50 ms',
    met: Math.max(...times) <= 50,
  });
}

async function fig4(): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f4');
  let agent = spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  await startShards(cp, 'node-a', 8);
  const times: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = Date.now();
    agent.kill('SIGTERM');
    times.push((await agent.exited) - t0);
    const reg = cp.waitFor('node-a', isRegister, 30_000);
    agent = spawnAgent(url, dirs);
    await reg;
    await sleep(500);
  }
  const m = median(times);
  rows.push({ figure: '4 SIGTERM → agent exit, 8 engines running', measured: ms(m), reference: '-', target: '<= 300 ms', met: m <= 300 });
}

async function fig5(): Promise<void> {
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

  // RSS growth over many heartbeats: a fast heartbeat, RSS read at each tenth.
  const beats = quick ? 2000 : 10_000;
  const { cp: cp2, url: url2 } = await controlPlane();
  const dirs2 = newRoot('f5b');
  const fast = spawnAgent(url2, dirs2, { heartbeat: '5ms' });
  await cp2.waitFor('node-a', isRegister, 30_000);
  const marks: number[] = [];
  let seen = 0;
  await new Promise<void>((resolve) => {
    cp2.on('message', (_n, m) => {
      if (m.msg.case !== 'heartbeat') return;
      seen++;
      if (seen % (beats / 10) === 0) marks.push(rssMb(fast.pid));
      if (seen >= beats) resolve();
    });
  });
  const firstHalf = median(marks.slice(1, 5));
  const secondHalf = median(marks.slice(6));
  const growth = secondHalf - firstHalf;
  rows.push({
    figure: `5c agent RSS after ${beats} heartbeats`,
    measured: `${(marks.at(-1) as number).toFixed(1)} MB (trend ${growth >= 0 ? '+' : ''}${growth.toFixed(1)} MB between halves)`,
    reference: `idle node: ${idleMb.toFixed(1)} MB`,
    target: 'no growth trend',
    met: growth < 5,
  });
  notes.push(`5c RSS at each tenth of the heartbeats (MB): ${marks.map((x) => x.toFixed(1)).join(', ')}`);
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

async function fig6(): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f6');
  spawnAgent(url, dirs, { extraYaml: '' });
  await cp.waitFor('node-a', isRegister, 30_000);
  // Two shards; one log is grown to 1 GiB with lines appended as an engine would.
  await startShards(cp, 'node-a', 2);
  const big = join(dirs.logDir, 'shards', 's0.log');
  const fd = openSync(big, 'a');
  const line = `${'x'.repeat(119)}\n`;
  const chunk = Buffer.from(line.repeat(8192));
  for (let written = 0; written < 1024 ** 3; written += chunk.length) writeSync(fd, chunk);
  closeSync(fd);
  const node = process.execPath;
  const [bigMs, smallMs] = timeSideBySide(
    [
      [node, BIN, 'ctl', 'logs', 's0', '-n', '100', '--socket', dirs.socket],
      [node, BIN, 'ctl', 'logs', 's1', '-n', '100', '--socket', dirs.socket],
    ],
    quick ? 5 : 11,
  ) as [number, number];
  rows.push({ figure: '6 `ctl logs -n 100` on a 1 GiB log', measured: `${ms(bigMs)} (${(bigMs / smallMs).toFixed(2)}x)`, reference: `1 KiB log: ${ms(smallMs)}`, target: '<= 1.5x', met: bigMs / smallMs <= 1.5 });
}

async function fig7(): Promise<void> {
  const dirs = newRoot('f7');
  const seconds = 3;
  const runs = quick ? 2 : 7;
  // The engine: a writer that prints 100-byte lines flat out for `seconds`,
  // then records how many it wrote.
  const writer = (out: string) =>
    `const line='${'y'.repeat(99)}\\n';let n=0;const end=Date.now()+${seconds * 1000};while(Date.now()<end){for(let i=0;i<1000;i++)process.stdout.write(line);n+=1000}require('fs').writeFileSync(${JSON.stringify(out)},String(n))`;
  const direct = (stdout: number, out: string): number => {
    const r = spawnSync(process.execPath, ['-e', writer(out)], { stdio: ['ignore', stdout, 'inherit'] });
    closeSync(stdout);
    if (r.status !== 0) throw new Error('writer failed');
    return Number(readFileSync(out, 'utf8'));
  };
  const { create: createMsg } = await import('@bufbuild/protobuf');
  const { StartShardSchema } = await import('../src/gen/llmgw/v1/agent_pb.js');
  /** The writer as a shard of a Supervisor of its own, which rotates its log at `logMaxBytes`. */
  const supervisedBy = (name: string, logMaxBytes: number) => {
    const logDir = join(dirs.root, name);
    const sup = new Supervisor({
      config: { stateDir: join(dirs.root, `${name}-state`), logDir, stopGraceMs: 2000, workerSettleMs: 100, healthIntervalMs: 10_000, stallTimeoutMs: 0, logMaxBytes, launcher: 'direct' },
    });
    const run = async (i: number): Promise<number> => {
      const out = join(dirs.root, `${name}-${i}`);
      const spec = createMsg(StartShardSchema, { shardId: `writer-${i}`, replicaId: 'r', profile: { engine: 'sim' } });
      await sup.start(parseStartShard(spec), { plan: { argv: [process.execPath, '-e', writer(out)], env: {} }, servesHttp: false });
      for (let t = 0; t < 200 && !existsSync(out); t++) await sleep(50);
      await sleep(200); // the count is written just before exit
      return Number(readFileSync(out, 'utf8'));
    };
    return { run, logDir, close: () => sup.close() };
  };
  const rotating = supervisedBy('rotating', 64 * 1024 ** 2);
  const unrotated = supervisedBy('unrotated', 2 ** 50);
  // A file in RAM (tmpfs), where there is no disk or journal: what any file costs over /dev/null.
  const ramLog = existsSync('/dev/shm') ? join('/dev/shm', `llmgw-bench-${process.pid}.log`) : join(dirs.root, 'ram.log');
  const kinds = {
    devNull: (i: number) => direct(openSync('/dev/null', 'w'), join(dirs.root, `null-${i}`)),
    ramFile: (i: number) => direct(openSync(ramLog, 'a'), join(dirs.root, `ram-${i}`)),
    plainFile: (i: number) => direct(openSync(join(dirs.root, 'plain.log'), 'a'), join(dirs.root, `plain-${i}`)),
    unrotated: unrotated.run,
    rotating: rotating.run,
  };
  const lines: Record<keyof typeof kinds, number[]> = { devNull: [], ramFile: [], plainFile: [], unrotated: [], rotating: [] };
  const order = Object.keys(kinds) as (keyof typeof kinds)[];
  // Interleaved run by run, so that load on this shared machine falls on all
  // alike; in a rotating order, each after a `sync` with the logs of the run
  // before removed: a run that follows a file run otherwise pays for the
  // writeback of its dirty pages (it once made the supervisor look 12 % slower).
  for (let i = 0; i < runs; i++) {
    for (let k = 0; k < order.length; k++) {
      for (const file of [join(dirs.root, 'plain.log'), ramLog]) rmSync(file, { force: true });
      for (const dir of [rotating.logDir, unrotated.logDir]) rmSync(join(dir, 'shards'), { recursive: true, force: true });
      spawnSync('sync');
      const kind = order[(i + k) % order.length] as keyof typeof kinds;
      lines[kind].push(await kinds[kind](i));
    }
  }
  rotating.close();
  unrotated.close();
  rmSync(ramLog, { force: true });
  const ref = median(lines.devNull);
  const rate = (n: number) => `${(n / seconds / 1e6).toFixed(2)} M lines/s`;
  const vsRef = (xs: number[]) => `${rate(median(xs))} (${(median(xs) / ref).toFixed(2)}x)`;
  const ratio = median(lines.rotating) / ref;
  rows.push({ figure: '7 engine logging flat out through the log file (rotation on)', measured: vsRef(lines.rotating), reference: `/dev/null: ${rate(ref)}`, target: '>= 0.9x', met: ratio >= 0.9 });
  notes.push(
    `7 medians of ${runs} interleaved runs of ${seconds} s, beside /dev/null: the same writer appending to a file in RAM (tmpfs), no supervisor, ${vsRef(lines.ramFile)}; to a plain file on the log's disk, ${vsRef(lines.plainFile)}; through the supervisor with rotation off, ${vsRef(lines.unrotated)}; with rotation at 64 MiB, ${vsRef(lines.rotating)}`,
  );
}

async function fig8(): Promise<void> {
  const total = quick ? 96 : 500;
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f8');
  spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  let ready = 0;
  let stopped = 0;
  let failed = 0;
  const failures: string[] = [];
  cp.on('shard-status', (_n, s) => {
    if (s.state === ShardState.READY) ready++;
    if (s.state === ShardState.STOPPED) stopped++;
    if (s.state === ShardState.FAILED) {
      failed++;
      failures.push(`${s.shardId}: ${s.error}`);
    }
  });
  // The node has 8 GPUs and a shard needs one, so shards go in waves of 8.
  const t0 = Date.now();
  let startMs = 0;
  let stopMs = 0;
  for (let base = 0; base < total; base += 8) {
    const ids = Array.from({ length: Math.min(8, total - base) }, (_, i) => `w${base + i}`);
    // Distinct: eight free ports picked at once can be the same one (1 in
    // ~300 waves of 8 from 8,000 ports), and the agent rightly refuses a
    // second shard on a port another holds: one such FAILED in 500 was the
    // bench's, not the agent's.
    const ports: number[] = [];
    while (ports.length < ids.length) {
      const p = await freePort();
      if (!ports.includes(p)) ports.push(p);
    }
    const a = Date.now();
    const readies = ids.map((id) => cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000));
    for (const [i, id] of ids.entries()) cp.send('node-a', { case: 'start', value: simStart(id, ports[i] as number, { gpu: i, args: ['--load-time', '0s'] }) });
    await Promise.all(readies);
    const b = Date.now();
    const stops = ids.map((id) => cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 60_000));
    for (const id of ids) cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
    await Promise.all(stops);
    startMs += b - a;
    stopMs += Date.now() - b;
  }
  const lost = total - ready + (total - stopped);
  rows.push({
    figure: `8 ${total} StartShard then StopShard (waves of 8)`,
    measured: `${ready} READY, ${stopped} STOPPED, ${failed} FAILED, ${lost} lost; ${((Date.now() - t0) / 1000).toFixed(1)} s (start ${(startMs / total).toFixed(0)} ms, stop ${(stopMs / total).toFixed(0)} ms per shard)`,
    reference: '-',
    target: 'all reported, 0 lost',
    met: lost === 0 && failed === 0,
  });
  for (const f of failures) notes.push(`8 FAILED ${f}`);
}

async function fig9(): Promise<void> {
  const m = timeCommand([process.execPath, BIN, 'discover', '--json', '--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', FIXTURE_SYSFS], 5);
  rows.push({ figure: '9 `llmgw discover --json` on the 8-GPU fixtures', measured: ms(m), reference: '-', target: 'recorded', met: undefined });
}

/**
 * GPUs through NVML beside nvidia-smi, in the same run: `discover --json`
 * (the fake libnvidia-ml.so and the fake nvidia-smi answer from the same data
 * set), one heartbeat memory reading of 8 GPUs (in-process NVML calls
 * against one nvidia-smi query), and how long the health watch's close()
 * takes with an NVML event wait pending (SIGTERM budget 300 ms).
 */
async function figNvml(): Promise<void> {
  const { buildFakeNvml } = await import('../test/agent/discovery/fake-nvml.js');
  const { NvmlLibrary } = await import('../src/agent/discovery/nvml/nvml-library.js');
  const { GpuHealthWatch } = await import('../src/agent/health/gpu-health-watch.js');
  const lib = buildFakeNvml();
  const discover = [BIN, 'discover', '--json', '--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', FIXTURE_SYSFS];
  const viaNvml = ['/usr/bin/env', `LLMGW_DISCOVERY_NVML_LIBRARY=${lib}`, process.execPath, ...discover];
  const viaSmi = ['/usr/bin/env', 'LLMGW_DISCOVERY_PREFER_NVML=false', process.execPath, ...discover];
  const [nvmlMs, smiMs] = timeSideBySide([viaNvml, viaSmi], quick ? 3 : 7);
  rows.push({ figure: 'nvml `discover --json`, 8 GPUs: NVML (reference: nvidia-smi)', measured: ms(nvmlMs as number), reference: ms(smiMs as number), target: 'recorded', met: undefined });

  const opened = NvmlLibrary.open(lib);
  if (!opened.ok) throw new Error(opened.reason);
  const nvml = opened.value;
  try {
    const reads: number[] = [];
    for (let r = 0; r < (quick ? 200 : 1000); r++) {
      const t0 = performance.now();
      for (let i = 0; i < nvml.gpuCount; i++) nvml.memory(i);
      reads.push(performance.now() - t0);
    }
    const smiRead = timeCommand([FAKE_NVIDIA_SMI, '--query-gpu=index,memory.used', '--format=csv,noheader,nounits'], quick ? 3 : 7);
    const nvmlRead = median(reads);
    rows.push({
      figure: 'nvml one heartbeat memory reading, 8 GPUs: NVML in-process (reference: one nvidia-smi query)',
      measured: `${(nvmlRead * 1000).toFixed(0)} µs`,
      reference: ms(smiRead),
      target: 'no process per reading',
      met: nvmlRead < smiRead,
    });

    const closes: number[] = [];
    for (let r = 0; r < (quick ? 5 : 15); r++) {
      const watch = new GpuHealthWatch({ nvml, kmsgPath: '', pollIntervalMs: 60_000 });
      await watch.start();
      // Mid-wait: half the default 100 ms wait has passed.
      await new Promise((resolve) => setTimeout(resolve, 50 + r * 7));
      const t0 = performance.now();
      await watch.close();
      closes.push(performance.now() - t0);
    }
    rows.push({
      figure: 'nvml health watch close() with an NVML event wait pending',
      measured: `${ms(median(closes))} median, ${ms(Math.max(...closes))} max`,
      reference: '-',
      target: '≤ 300 ms',
      met: Math.max(...closes) <= 300,
    });
  } finally {
    nvml.close();
  }
}

const FIGURES: Record<string, () => Promise<void>> = { nvml: figNvml, '1': fig1, '2': fig2, '3': fig3, '4': fig4, '5': fig5, '6': fig6, '7': fig7, '8': fig8, '9': fig9, '10': fig10 };
FIGURES.fleet = () => fleetFigure(rows, notes);
FIGURES.pidfd = figPidfd;
FIGURES.floor = () => floorFigures(rows, notes, quick);
FIGURES['11'] = () => readinessFigure(rows, notes, quick);
FIGURES['12'] = () => stopDrainFigure(rows, notes, quick);
FIGURES['13'] = () => readyAfterAnswerFigure(rows, notes, quick);
FIGURES['14'] = () => warmStartFigures(rows, notes, quick);

function table(): string {
  const head = '| # | figure | measured | reference | target | met |\n|---|---|---|---|---|---|';
  return [head, ...rows.map((r, i) => `| ${i + 1} | ${r.figure} | ${r.measured} | ${r.reference} | ${r.target} | ${r.met === undefined ? '-' : r.met ? 'yes' : '**no**'} |`)].join('\n');
}

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
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const header = [
    `## ${new Date().toISOString().slice(0, 10)} — ${cpus().length} × ${cpu}, ${(totalmem() / 1024 ** 3).toFixed(0)} GiB, Node ${process.version}${quick ? ' (--quick)' : ''}`,
    '',
    table(),
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

await main();
