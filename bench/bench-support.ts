/**
 * What the benchmarks share: real agent processes, an in-process reference
 * control plane, sim shards, and small statistics. Everything started is
 * recorded so one cleanup at the end (or on Ctrl-C) kills it.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa, type ResultPromise } from 'execa';
import { ControlPlane } from '../src/control/control-plane.js';
import { ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, agentConfigYaml, agentDirs } from '../test/helpers/agent-config-yaml.js';
import { freePort, killEverything } from '../test/helpers/engine-processes.js';
import { BIN } from '../test/helpers/run-cli.js';
import { shardIs, simStart } from '../test/helpers/sim-shards.js';

export { freePort };

const roots: string[] = [];
const children: ResultPromise[] = [];
const planes: ControlPlane[] = [];
let agentNodeArgs: string[] = [];

/**
 * `--cpu-prof` for every agent started from now on, profiles written to
 * `dir`. Node writes a profile only on a clean exit, so cleanup() then stops
 * agents with SIGTERM before SIGKILL.
 */
export function profileAgentsInto(dir: string): void {
  agentNodeArgs = ['--cpu-prof', `--cpu-prof-dir=${dir}`];
}

export function newRoot(tag: string): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), `llmgw-bench-${tag}-`)));
  roots.push(dirs.root);
  return dirs;
}

export async function cleanup(): Promise<void> {
  const started = children.splice(0);
  if (agentNodeArgs.length > 0) {
    for (const c of started) c.kill('SIGTERM');
    await Promise.race([Promise.all(started), sleep(5000)]);
  }
  for (const c of started) c.kill('SIGKILL');
  for (const root of roots.splice(0)) {
    await killEverything(join(root, 'log'));
    // LLMGW_BENCH_KEEP=1 keeps the agents' directories (logs, shard output) to read after a figure failed.
    if (process.env.LLMGW_BENCH_KEEP === '1') console.error(`kept ${root}`);
    else rmSync(root, { recursive: true, force: true });
  }
  for (const cp of planes.splice(0)) await cp.close();
}

export async function controlPlane(): Promise<{ cp: ControlPlane; url: string }> {
  const cp = new ControlPlane({ placementDelayMs: 0 });
  planes.push(cp);
  const { url } = await cp.listen({ host: '127.0.0.1', port: 0 });
  return { cp, url };
}

export interface BenchAgent {
  pid: number;
  spawnedAtMs: number;
  exited: Promise<number>;
  kill(signal?: NodeJS.Signals): void;
}

/**
 * The agent runs with the runtime flags its systemd unit gives it, read from
 * the unit so that the benchmark measures the agent as deployed, unless
 * LLMGW_BENCH_NODE_OPTIONS says otherwise.
 */
export function unitNodeOptions(): string {
  // A trial of other runtime flags (the unit's --max-semi-space-size, say)
  // without editing the unit: LLMGW_BENCH_NODE_OPTIONS replaces them, "" for none.
  if (process.env.LLMGW_BENCH_NODE_OPTIONS !== undefined) return process.env.LLMGW_BENCH_NODE_OPTIONS;
  const unit = readFileSync(new URL('../packaging/llmgw-agent.service', import.meta.url), 'utf8');
  return /^Environment=NODE_OPTIONS=(.*)$/m.exec(unit)?.[1]?.trim() ?? '';
}

export interface SpawnAgentOptions {
  heartbeat?: string;
  extraYaml?: string;
  env?: Record<string, string>;
  /** node_id; node-a by default. */
  nodeId?: string;
  /** reconnect_base and reconnect_max; the tests' fast 100ms and 1s by default. */
  reconnect?: { base: string; max: string };
  /** argv the agent's command is run under, e.g. nsenter into a systemd lab. */
  prefix?: string[];
  /** supervisor.health_interval; 10s (the default) unless a figure needs failures seen sooner. */
  healthInterval?: string;
  /** supervisor.worker_settle; 10s (the default). */
  workerSettle?: string;
  /** supervisor.stop_grace; the tests' 3s unless a figure needs an engine's own drain to end a stop. */
  stopGrace?: string;
}

/**
 * The agent's bin/run.js: this checkout's, or LLMGW_BENCH_BIN's, another
 * build's copy (bin, dist, package.json, oclif.manifest.json beside a
 * node_modules link), to measure two builds in turns in one session.
 */
function agentBin(): string {
  return process.env.LLMGW_BENCH_BIN || BIN;
}

export function spawnAgent(server: string, dirs: AgentDirs, opts: SpawnAgentOptions = {}): BenchAgent {
  mkdirSync(dirs.root, { recursive: true });
  const config = join(dirs.root, 'agent.yaml');
  // The test config's fast timers (health probes every 500 ms) suit tests,
  // not a measurement of what the agent costs: production defaults here.
  // Figures start up to 8 shards, one per fake GPU: GPUs 3 and 4 carry the data
  // set's foreign memory, which is a validation test's subject, not the bench's.
  let yaml = agentConfigYaml({ server, dirs, nodeId: opts.nodeId, heartbeat: opts.heartbeat ?? '1s', extraYaml: opts.extraYaml, foreignMemoryShare: '100%' })
    .replace('log_level: debug', process.env.LLMGW_BENCH_KEEP === '1' ? 'log_level: info' : 'log_level: warn')
    .replace(/^ {2}health_interval: .*$/m, `  health_interval: ${opts.healthInterval ?? '10s'}`)
    .replace(/^ {2}worker_settle: .*$/m, `  worker_settle: ${opts.workerSettle ?? '10s'}`)
    .replace(/^ {2}stop_grace: .*$/m, `  stop_grace: ${opts.stopGrace ?? '3s'}`);
  if (opts.reconnect) yaml = yaml.replace(/^reconnect_base: .*$/m, `reconnect_base: ${opts.reconnect.base}`).replace(/^reconnect_max: .*$/m, `reconnect_max: ${opts.reconnect.max}`);
  writeFileSync(config, yaml);
  const spawnedAtMs = Date.now();
  const argv = [...(opts.prefix ?? []), process.execPath, ...agentNodeArgs, agentBin(), 'agent', 'run', '--config', config];
  const child = execa(argv[0] as string, argv.slice(1), {
    reject: false,
    stdin: 'ignore',
    // Kept with the agent's directory (LLMGW_BENCH_KEEP=1): its log, at info.
    stdout: process.env.LLMGW_BENCH_KEEP === '1' ? { file: join(dirs.root, 'agent.log') } : 'ignore',
    stderr: process.env.LLMGW_BENCH_KEEP === '1' ? { file: join(dirs.root, 'agent.log') } : 'ignore',
    env: { LLMGW_FAKE_GPUS: 'hgx-h100x8', NODE_OPTIONS: unitNodeOptions(), ...opts.env },
  });
  children.push(child);
  return {
    pid: child.pid as number,
    spawnedAtMs,
    exited: child.then(() => Date.now()),
    kill: (signal = 'SIGTERM') => child.kill(signal),
  };
}

/**
 * bench/floor.mjs for `nodeId` against `server`, with the agent's runtime
 * flags; killed by cleanup() like the agents.
 */
export function spawnFloor(server: string, nodeId: string, stateDir: string): BenchAgent {
  const spawnedAtMs = Date.now();
  // Never profiled: a profile is written only on a clean exit, and the floor is killed.
  const child = execa(process.execPath, [fileURLToPath(new URL('./floor.mjs', import.meta.url)), server, nodeId, stateDir], {
    reject: false,
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'inherit',
    env: { NODE_OPTIONS: unitNodeOptions() },
  });
  children.push(child);
  return { pid: child.pid as number, spawnedAtMs, exited: child.then(() => Date.now()), kill: (signal = 'SIGTERM') => child.kill(signal) };
}

/**
 * bench/steady-floor.mjs for `nodeId` against `server`: the steady-state
 * floor of figure 5b, probing `ports` and stat-ing the shards' logs under
 * `dirs` as the agent does. It runs with the agent's runtime flags (the
 * unit's NODE_OPTIONS and the --no-opt bin/run.js sets for `agent run`) and
 * its fake GPUs (`fakeGpus`, a data set bin/fake-nvidia-smi reads), so the
 * two differ in what they do, not how V8 runs it.
 */
export function spawnSteadyFloor(server: string, nodeId: string, dirs: AgentDirs, ports: readonly number[], nvidiaSmi: string, fakeGpus = 'hgx-h100x8'): BenchAgent {
  const spawnedAtMs = Date.now();
  const script = fileURLToPath(new URL('./steady-floor.mjs', import.meta.url));
  // Profiled with the agents (--cpu-prof), so the two profiles can be set side by side.
  const child = execa(process.execPath, ['--no-opt', ...agentNodeArgs, script, server, nodeId, nvidiaSmi, dirs.stateDir, dirs.logDir, ...ports.map(String)], {
    reject: false,
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'inherit',
    env: { LLMGW_FAKE_GPUS: fakeGpus, NODE_OPTIONS: unitNodeOptions() },
  });
  children.push(child);
  return { pid: child.pid as number, spawnedAtMs, exited: child.then(() => Date.now()), kill: (signal = 'SIGTERM') => child.kill(signal) };
}

/** Starts `n` sim shards s0..s(n-1) on GPUs 0..n-1 and waits until all are READY; returns their pids. */
export async function startShards(cp: ControlPlane, nodeId: string, n: number): Promise<{ ids: string[]; pids: number[]; ports: number[] }> {
  const ids = Array.from({ length: n }, (_, i) => `s${i}`);
  const ports: number[] = [];
  for (let i = 0; i < n; i++) ports.push(await freePort());
  const ready = ids.map((id) => cp.waitFor(nodeId, shardIs(id, ShardState.READY), 60_000));
  for (const [i, id] of ids.entries()) cp.send(nodeId, { case: 'start', value: simStart(id, ports[i] as number, { gpu: i, args: ['--load-time', '0s'] }) });
  const msgs = await Promise.all(ready);
  return { ids, ports, pids: msgs.map((m) => (m.msg.value as { pid: number }).pid) };
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** utime + stime of a process, in seconds. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
