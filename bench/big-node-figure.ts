/**
 * Figure 16: the cost of a big node (issue 52 item 4). For 8, 32 and 64 sim
 * shards, each on its own GPU of a fake box with that many GPUs, the agent's
 * CPU and RSS in steady state beside its floor (bench/steady-floor.mjs
 * probing the same shards and reading the same box) in the same minute, and
 * the time from each engine's first answer to its READY on the stream while
 * all of them start at once.
 *
 * "The engine's first answer" is when the sim writes "Uvicorn running on" to
 * its log, right after its server listens (src/sim/sim-engine.ts), seen through one
 * inotify watch of the shards' log directory: polling 64 loading engines
 * every few milliseconds from the bench would load the machine the figure
 * measures. Its moment is the log's mtime, not the watch's event, which
 * comes through the bench's own loop (it also runs the control plane).
 */
import { mkdirSync, readFileSync, statSync, watch, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { FAKE_NVIDIA_SMI } from '../test/helpers/agent-config-yaml.js';
import { isRegister, shardIs, simStart } from '../test/helpers/sim-shards.js';
import { get } from 'node:http';
import { createServer } from 'node:net';
import { cleanup, controlPlane, cpuSeconds, newRoot, rssMb, sleep, spawnAgent, spawnSteadyFloor } from './bench-support.js';
import type { BenchRow } from './fleet-figure.js';

export const BIG_NODE_COUNTS = [8, 32, 64] as const;

/** The shard counts to measure: LLMGW_BENCH_SHARDS=64 (or 8,64) for one profiled count, all three otherwise. */
function countsToMeasure(): readonly number[] {
  const only = process.env.LLMGW_BENCH_SHARDS;
  return only ? only.split(',').map(Number) : BIG_NODE_COUNTS;
}

/** LLMGW_BENCH_STEADY_S: the steady window in seconds (a longer one for a profile), the run's own otherwise. */
function steadySeconds(quick: boolean): number {
  const s = Number(process.env.LLMGW_BENCH_STEADY_S);
  return Number.isFinite(s) && s > 0 ? s : quick ? 20 : 60;
}

/** What the sim writes once its server listens (src/sim/sim-engine.ts), as vLLM's uvicorn does. */
const STARTUP_LINE = 'Uvicorn running on';
/** What the sim writes once its process has started and read its flags, before its load time runs. */
const LOADING_LINE = 'Starting to load model';

/**
 * The engines' load time: LOAD_BASE_MS + LOAD_PER_SHARD_MS a shard, then
 * LOAD_SPREAD_MS between one engine's answer and the next. 600 ms a shard
 * (until 2026-12-06) was shorter than 64 sim processes take to start on 2
 * loaded cores (p95 72 s against 43 s): engines still starting answered at
 * once, in bursts, and the READY lag measured the machine's start of 64 Node
 * processes. Each run now says how long after the last engine's start the
 * first answer came (`quietMs`); the lag is given over the answers after it.
 */
const LOAD_BASE_MS = 5000;
const LOAD_PER_SHARD_MS = 1500;
const LOAD_SPREAD_MS = 100;

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] as number;
};

/**
 * A fake box of `n` H100s in bin/fake-nvidia-smi's formats (fixtures/gpu's
 * header lists them) under `dir`: every GPU on one NVLink switch, none busy.
 */
export function writeFakeBox(dir: string, n: number): string {
  mkdirSync(dir, { recursive: true });
  const gpus = Array.from({ length: n }, (_, i) => i);
  const uuid = (i: number) => `GPU-3f1c0a5e-8b2d-4c7a-9e61-${i.toString(16).padStart(12, '0')}`;
  const bus = (i: number) => `00000000:${(0x10 + i).toString(16).toUpperCase().padStart(2, '0')}:00.0`;
  writeFileSync(
    join(dir, 'query-gpu.csv'),
    [
      'index, uuid, name, pci.bus_id, memory.total [MiB], memory.used [MiB], driver_version, compute_cap, mig.mode.current, temperature.gpu, utilization.gpu [%]',
      ...gpus.map((i) => `${i}, ${uuid(i)}, NVIDIA H100 80GB HBM3, ${bus(i)}, 81559 MiB, 0 MiB, 550.54.15, 9.0, Disabled, 31, 0 %`),
    ].join('\n') + '\n',
  );
  writeFileSync(join(dir, 'list-L.txt'), gpus.map((i) => `GPU ${i}: NVIDIA H100 80GB HBM3 (UUID: ${uuid(i)})`).join('\n') + '\n');
  const half = Math.ceil(n / 2);
  const rows = gpus.map((i) => [`GPU${i}`, ...gpus.map((j) => (i === j ? ' X ' : 'NV18')), i < half ? '0-55,112-167' : '56-111,168-223', i < half ? '0' : '1', '', 'N/A'].join('\t'));
  writeFileSync(join(dir, 'topo-m.txt'), [`\t${gpus.map((i) => `GPU${i}`).join('\t')}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID`, ...rows, '', 'Legend:', '', '  X    = Self', '  NV#  = Connection traversing a bonded set of # NVLinks', ''].join('\n'));
  writeFileSync(join(dir, 'version.txt'), 'NVIDIA-SMI version  : 550.54.15\nNVML version        : 550.54\nDRIVER version      : 550.54.15\nCUDA Version        : 12.4\n');
  return dir;
}

/**
 * A port for one engine, from 62000-64999: above the ephemeral range, and
 * clear of freePort's 10000-17999, which every test file on the machine
 * draws from. With engines loading for 100 s at 64 shards, a port drawn
 * there was taken meanwhile by another suite's server (seen: "port 11203
 * held by another process", which ended the whole figure).
 */
const handedOut = new Set<number>();
async function enginePort(): Promise<number> {
  for (;;) {
    const port = 62_000 + Math.floor(Math.random() * 3000);
    if (handedOut.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '0.0.0.0', () => s.close(() => resolve(true)));
    });
    if (!free) continue;
    handedOut.add(port);
    return port;
  }
}

/** GET of 127.0.0.1:`port``path` with a fresh connection, as the agent's probes; resolves when the body is read (or it failed). */
function plainGet(port: number, path: string): Promise<void> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve());
      res.on('error', () => resolve());
    });
    req.on('error', () => resolve());
  });
}

/** A moment on stderr in CLOCK_MONOTONIC microseconds, the clock of a .cpuprofile's timestamps: to cut a profile to a phase. */
function mark(what: string): void {
  process.stderr.write(`  ${what} at ${process.hrtime.bigint() / 1000n} us (monotonic)\n`);
}

interface CountFigures {
  n: number;
  agentCpuPct: number;
  floorCpuPct: number;
  rssMaxMb: number;
  readyLagMs: number[];
  /** The same, only for engines that answered after every engine had started (its loading line written). */
  quietLagMs: number[];
  /** The last engine's loading line → the first engine's answer: negative when answers came while engines still started. */
  quietMs: number;
  /** Inventories received from StartShard to the last READY. */
  inventories: number;
  /** StartShard sent → the engine's startup line: the engines' own start, which the agent does not control. */
  engineStartMs: number[];
  /**
   * The machine's own lag at that moment: the bench's GET /health and GET
   * /v1/models of the engine (at once, as the agent asks them), sent when
   * its startup line is seen, until both are answered. What a probe costs on
   * this machine while the rest of the node starts, without the agent.
   */
  benchProbeMs: number[];
  /** How long after the engine wrote its startup line the watch saw it (the file's mtime): what the zero point was late by when it was the watch's event. */
  watchLateMs: number[];
  load: string;
}

async function measureCount(n: number, seconds: number): Promise<CountFigures> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot(`f16-${n}`);
  const box = writeFakeBox(join(dirs.root, 'gpus'), n);
  const agent = spawnAgent(url, dirs, { heartbeat: '1s', env: { LLMGW_FAKE_GPUS: box } });
  await cp.waitFor('node-a', isRegister, 30_000);

  const ids = Array.from({ length: n }, (_, i) => `s${i}`);
  const ports: number[] = [];
  for (let i = 0; i < n; i++) ports.push(await enginePort());
  const shardLogs = join(dirs.logDir, 'shards');
  mkdirSync(shardLogs, { recursive: true });
  const answeredAt = new Map<string, number>();
  const loadingAt = new Map<string, number>();
  const benchProbeMs: number[] = [];
  const watchLateMs: number[] = [];
  const readyAt = new Map<string, number>();
  const watcher = watch(shardLogs, (_event, file) => {
    const id = file?.toString().replace(/\.log$/, '');
    if (!id || !ids.includes(id) || answeredAt.has(id)) return;
    const at = performance.now();
    const wallMs = Date.now();
    try {
      const path = join(shardLogs, `${id}.log`);
      const text = readFileSync(path, 'utf8');
      if (!loadingAt.has(id) && text.includes(LOADING_LINE)) loadingAt.set(id, at);
      if (text.includes(STARTUP_LINE)) {
        // When the engine wrote it, from the file's mtime while it is the
        // last line (nothing written after it): the watch's own event comes
        // through this process's loop, late by what else the bench does then
        // (the control plane decoding the agent's messages, 64 logs read).
        const last = text.trimEnd().split('\n').at(-1) ?? '';
        const lateMs = last.includes(STARTUP_LINE) ? Math.max(0, wallMs - Number(statSync(path, { bigint: true }).mtimeNs) / 1e6) : 0;
        watchLateMs.push(lateMs);
        answeredAt.set(id, at - lateMs);
        const port = ports[ids.indexOf(id)] as number;
        void Promise.all([plainGet(port, '/health'), plainGet(port, '/v1/models')]).then(() => benchProbeMs.push(performance.now() - at));
      }
    } catch {
      // Not created yet, or rotated: the next change says.
    }
  });
  // Inventories the control plane received between StartShard and the last READY: what else the stream carried.
  let inventories = 0;
  const onMessage = (nodeId: string, m: Parameters<typeof isRegister>[0]) => {
    if (nodeId !== 'node-a') return;
    if (m.msg.case === 'inventory') inventories++;
    if (m.msg.case === 'shard' && m.msg.value.state === ShardState.READY && !readyAt.has(m.msg.value.shardId)) readyAt.set(m.msg.value.shardId, performance.now());
  };
  cp.on('message', onMessage);
  const ready = ids.map((id) => cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 400_000));
  const sentAt = performance.now();
  mark(`${n} shards: StartShard sent`);
  // Every engine loads until all have started (64 Node processes starting on 2
  // loaded cores took 27 s), then they answer one after another, LOAD_SPREAD_MS
  // apart: the lag is the agent's with N readiness waits under way, not the
  // machine's while N processes start.
  const loadMs = (i: number) => LOAD_BASE_MS + LOAD_PER_SHARD_MS * n + LOAD_SPREAD_MS * i;
  for (const [i, id] of ids.entries()) cp.send('node-a', { case: 'start', value: simStart(id, ports[i] as number, { gpu: i, args: ['--load-time', `${loadMs(i)}ms`] }) });
  const ends = await Promise.all(ready);
  mark(`${n} shards: all READY`);
  cp.off('message', onMessage);
  watcher.close();
  const failed = ends.find((m) => m.msg.case === 'shard' && m.msg.value.state !== ShardState.READY);
  if (failed && failed.msg.case === 'shard') throw new Error(`${n} shards: ${failed.msg.value.shardId} did not become READY: ${failed.msg.value.error}`);
  // A startup line seen after READY (the watch's event came late): the lag is under the watch's resolution.
  const readyLagMs = ids.filter((id) => answeredAt.has(id)).map((id) => Math.max(0, (readyAt.get(id) as number) - (answeredAt.get(id) as number)));
  const engineStartMs = ids.filter((id) => answeredAt.has(id)).map((id) => (answeredAt.get(id) as number) - sentAt);
  const lastStart = Math.max(...ids.map((id) => loadingAt.get(id) ?? Number.POSITIVE_INFINITY));
  const quietMs = Math.min(...answeredAt.values()) - lastStart;
  const quietLagMs = ids.filter((id) => (answeredAt.get(id) ?? 0) > lastStart).map((id) => Math.max(0, (readyAt.get(id) as number) - (answeredAt.get(id) as number)));
  if (readyLagMs.length < n / 2) throw new Error(`${n} shards: the startup line was seen for only ${readyLagMs.length}`);

  const floorRegistered = cp.waitFor('steady-floor', isRegister, 30_000);
  const floor = spawnSteadyFloor(url, 'steady-floor', dirs, ports, FAKE_NVIDIA_SMI, box);
  await floorRegistered;
  await sleep(3000);
  mark(`${n} shards: steady window starts`);
  const cpu0 = cpuSeconds(agent.pid);
  const floorCpu0 = cpuSeconds(floor.pid);
  let rssMaxMb = 0;
  for (let i = 0; i < seconds; i++) {
    await sleep(1000);
    rssMaxMb = Math.max(rssMaxMb, rssMb(agent.pid));
  }
  mark(`${n} shards: steady window ends`);
  const agentCpuPct = ((cpuSeconds(agent.pid) - cpu0) / seconds) * 100;
  const floorCpuPct = ((cpuSeconds(floor.pid) - floorCpu0) / seconds) * 100;
  return { n, agentCpuPct, floorCpuPct, rssMaxMb, readyLagMs, quietLagMs, quietMs, inventories, engineStartMs, benchProbeMs, watchLateMs, load: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ') };
}

/** The lag over the answers after every engine had started, when some came before. */
function quietNote(f: CountFigures): string {
  if (f.quietLagMs.length === f.readyLagMs.length || f.quietLagMs.length === 0) return '';
  return `; after every engine had started: p95 ${pct(f.quietLagMs, 95).toFixed(0)} ms (${f.quietLagMs.length} shards)`;
}

export async function bigNodeFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const seconds = steadySeconds(quick);
  const all: CountFigures[] = [];
  for (const n of countsToMeasure()) {
    // One count at a time, each with its own agent, control plane and shards;
    // a count that fails is a row of its own, the others still measured.
    try {
      all.push(await measureCount(n, seconds));
    } catch (err) {
      rows.push({ figure: `16 ${n} shards (did not complete)`, measured: err instanceof Error ? err.message : String(err), reference: '-', target: '-', met: false });
    }
    await cleanup();
  }
  if (all.length === 0) return;
  const base = all[0] as CountFigures;
  for (const f of all) {
    const ratio = f.agentCpuPct / f.floorCpuPct;
    const perShard = f.agentCpuPct / f.n;
    const basePerShard = base.agentCpuPct / base.n;
    rows.push({
      figure: `16 agent CPU over ${seconds} s, ${f.n} shards on ${f.n} fake GPUs, beside its floor`,
      measured: `${f.agentCpuPct.toFixed(2)} % (${ratio.toFixed(2)}x floor; ${(perShard * 1000).toFixed(0)} m% a shard)`,
      reference: `floor: ${f.floorCpuPct.toFixed(2)} %; 8 shards: ${(basePerShard * 1000).toFixed(0)} m% a shard; load ${f.load}`,
      target: '<= 1.3x floor, at most linear',
      // Linear: no more a shard than at 8 (with a tenth for the minute's noise).
      met: ratio <= 1.3 && perShard <= basePerShard * 1.1,
    });
    const rssTarget = 70 + (f.n - 8);
    rows.push({
      figure: `16 agent RSS over ${seconds} s, ${f.n} shards`,
      measured: `max ${f.rssMaxMb.toFixed(1)} MB`,
      reference: `8 shards: ${base.rssMaxMb.toFixed(1)} MB`,
      target: `<= ${rssTarget} MB (70 MB + 1 MB a shard beyond 8)`,
      met: f.rssMaxMb <= rssTarget,
    });
    rows.push({
      figure: `16 engine's first answer -> READY on the stream, ${f.n} shards started at once`,
      measured: `p50 ${pct(f.readyLagMs, 50).toFixed(0)} ms, p95 ${pct(f.readyLagMs, 95).toFixed(0)} ms, max ${pct(f.readyLagMs, 100).toFixed(0)} ms (${f.readyLagMs.length} shards)${quietNote(f)}; ${f.inventories} Inventories on the stream until the last READY`,
      reference: `StartShard -> the engine's startup line (its load time included): p50 ${pct(f.engineStartMs, 50).toFixed(0)} ms, p95 ${pct(f.engineStartMs, 95).toFixed(0)} ms; the last engine started ${(f.quietMs / 1000).toFixed(1)} s before the first answered; the bench's own GET /health + /v1/models sent at the startup line: p50 ${pct(f.benchProbeMs, 50).toFixed(0)} ms, p95 ${pct(f.benchProbeMs, 95).toFixed(0)} ms; the startup line taken from the log's mtime, which its watch saw p50 ${pct(f.watchLateMs, 50).toFixed(0)} ms, p95 ${pct(f.watchLateMs, 95).toFixed(0)} ms, max ${pct(f.watchLateMs, 100).toFixed(0)} ms later`,
      target: f.n === 64 ? '<= 100 ms p95' : 'at most linear',
      met: f.n === 64 ? f.quietMs > 0 && pct(f.readyLagMs, 95) <= 100 : undefined,
    });
  }
  notes.push(
    `16: a fake box of N H100s (bench/big-node-figure.ts writeFakeBox, bin/fake-nvidia-smi), one sim shard a GPU, all started at once, loading until all have started (${LOAD_BASE_MS} ms + ${LOAD_PER_SHARD_MS} ms a shard) and answering ${LOAD_SPREAD_MS} ms apart; steady state with a 1 s heartbeat and production timers (health 10 s, discovery 60 s); the floor (bench/steady-floor.mjs) probes the same N engines and reads the same box. The first answer is the sim's startup log line, seen by an inotify watch of the log directory, which also sees each engine's loading line (its process started); its moment is the log file's mtime (the kernel's coarse clock) while that line is the file's last, the watch's event having come through the bench's own loop, behind the control plane's work on the agent's messages (since 2026-12-06, branch ready7): the READY lag is fair only when the last engine started before the first answered, which each row's reference says.`,
  );
}
