import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { create } from '@bufbuild/protobuf';
import { ControlPlane } from '../../../src/control/control-plane.js';
import {
  type AgentMessage,
  type Register,
  ShardState,
  type ShardStatus,
  type StartShard,
  StopShardSchema,
} from '../../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, agentConfigYaml, agentDirs } from '../../helpers/agent-config-yaml.js';
import { freePort, isRunning, killEverything, procInfo, processesWritingUnder, until } from '../../helpers/engine-processes.js';
import { isRegister, shardIs } from '../../helpers/sim-shards.js';
import { spawnAgentProcess } from '../../helpers/spawn-agent-process.js';

/**
 * What the fault campaign runs scenarios in: a temporary directory that
 * holds the agent's state and logs (so every engine a scenario makes can be
 * found by what its stdout points at), a reference control plane, and the
 * real `llmgw agent run`. Free of vitest, so that `npm run soak` runs the
 * very same scenarios many times without a test runner.
 */

export const NODE = 'node-a';
const S = ShardState;

export interface AgentHandle {
  pid: number;
  logs(): Record<string, unknown>[];
  exited: Promise<{ exitCode: number | undefined; signal: string | undefined }>;
  kill(signal?: NodeJS.Signals): void;
}

export interface CpHandle {
  cp: ControlPlane;
  url: string;
  port: number;
  close(): Promise<void>;
}

/** An engine that must still be serving, with the same pid, when the scenario ends. */
export interface HealthyEngine {
  shardId: string;
  pid: number;
  port: number;
}

export interface ScenarioOutcome {
  /** Requests or reports that should have survived the fault and did not. */
  dataLost: number;
  /** Which phase a timing-dependent fault really hit, for the soak table's notes. */
  hit?: string;
}

export class FaultHarness {
  readonly root: string;
  readonly dirs: AgentDirs;
  /** The control plane the agent talks to now (scenarios may replace it). */
  cpHandle?: CpHandle;
  agent?: AgentHandle;
  private readonly cleanups: (() => unknown)[] = [];
  /** Shards the scenario touched: each must end READY, STOPPED (when stopped on purpose) or FAILED with a reason. */
  readonly shards = new Set<string>();
  readonly stoppedOnPurpose = new Set<string>();
  /** Shards the scenario expects to be refused; their last report must be FAILED with an error. */
  readonly expectFailed = new Set<string>();
  readonly healthy: HealthyEngine[] = [];
  /** Everything ever received, across control-plane restarts, in order. */
  readonly received: AgentMessage[] = [];

  constructor(name: string) {
    this.root = mkdtempSync(join(tmpdir(), `llmgw-fault-${name}-`));
    this.dirs = agentDirs(this.root);
    mkdirSync(this.dirs.stateDir, { recursive: true });
    mkdirSync(this.dirs.logDir, { recursive: true });
  }

  defer(fn: () => unknown): void {
    this.cleanups.push(fn);
  }

  get cp(): ControlPlane {
    assert.ok(this.cpHandle, 'no control plane is running');
    return this.cpHandle.cp;
  }

  get url(): string {
    assert.ok(this.cpHandle);
    return this.cpHandle.url;
  }

  /** A reference control plane in manual mode: the scenario sends the commands. */
  async startControlPlane(port = 0): Promise<CpHandle> {
    const cp = new ControlPlane({ placementDelayMs: 0 });
    cp.on('message', (_node, m) => this.received.push(m));
    let listened: { url: string; port: number } | undefined;
    for (let attempt = 0; !listened; attempt++) {
      try {
        listened = await cp.listen({ host: '127.0.0.1', port });
      } catch (err) {
        // The previous holder of a fixed port may be a moment from releasing it.
        if (port === 0 || attempt > 40) throw err;
        await sleep(50);
      }
    }
    const handle: CpHandle = { cp, url: listened.url, port: listened.port, close: () => cp.close() };
    this.defer(() => cp.close());
    this.cpHandle = handle;
    return handle;
  }

  /** The real agent, with the fake 8-GPU box and fast timers, logging JSON on stderr. */
  startAgent(o: { server?: string; extraYaml?: string; heartbeat?: string; dirs?: AgentDirs; supervisor?: string[] } = {}): AgentHandle {
    const dirs = o.dirs ?? this.dirs;
    const configPath = join(this.root, `${NODE}.yaml`);
    // register_timeout 2s: the silent-stream scenario is an agent giving up on a stream that never says anything.
    writeFileSync(configPath, agentConfigYaml({ server: o.server ?? this.url, dirs, extraYaml: o.extraYaml, heartbeat: o.heartbeat, supervisor: o.supervisor, registerTimeout: '2s' }));
    const { child, records } = spawnAgentProcess(configPath);
    const exited = child.then((r) => ({ exitCode: r.exitCode, signal: r.signal }));
    this.defer(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    const handle: AgentHandle = { pid: child.pid as number, logs: () => records, exited, kill: (sig = 'SIGTERM') => child.kill(sig) };
    this.agent = handle;
    return handle;
  }

  /** SIGKILL, as the OOM killer or a crash would end it: no cleanup of any kind. */
  async killAgent(): Promise<void> {
    const agent = this.agent;
    assert.ok(agent);
    agent.kill('SIGKILL');
    await agent.exited;
  }

  /** Starts a control plane and an agent and waits for the agent to register. */
  async boot(o: { extraYaml?: string; supervisor?: string[] } = {}): Promise<Register> {
    if (!this.cpHandle) await this.startControlPlane();
    const registered = this.cp.waitFor(NODE, isRegister, 30_000);
    this.startAgent(o);
    return (await registered).msg.value as Register;
  }

  send(msg: Parameters<ControlPlane['send']>[1]): void {
    if (msg.case === 'start') this.shards.add(msg.value.shardId);
    if (msg.case === 'stop') this.stoppedOnPurpose.add(msg.value.shardId);
    this.cp.send(NODE, msg);
  }

  start(spec: StartShard): void {
    this.send({ case: 'start', value: spec });
  }

  stop(shardId: string, graceMs?: number): void {
    this.send({
      case: 'stop',
      value: create(StopShardSchema, {
        shardId,
        ...(graceMs === undefined ? {} : { grace: { seconds: BigInt(Math.floor(graceMs / 1000)), nanos: (graceMs % 1000) * 1e6 } }),
      }),
    });
  }

  /** Resolves with the first status for `shardId` in one of `states` from now on. */
  async waitShard(shardId: string, states: ShardState[], timeoutMs = 30_000): Promise<ShardStatus> {
    const m = await this.cp.waitFor(NODE, shardIs(shardId, ...states), timeoutMs);
    return m.msg.value as ShardStatus;
  }

  async waitRegister(timeoutMs = 30_000): Promise<Register> {
    return (await this.cp.waitFor(NODE, isRegister, timeoutMs)).msg.value as Register;
  }

  registrations(): number {
    return this.cp.messages(NODE).filter(isRegister).length;
  }

  /** Records an engine that must survive the scenario untouched. */
  keepsServing(shardId: string, pid: number, port: number): void {
    this.healthy.push({ shardId, pid, port });
  }

  /** Process groups writing each shard log: more than one is two engines for one shard. */
  enginesPerShard(): Map<string, Set<number>> {
    const out = new Map<string, Set<number>>();
    const shardLogs = join(this.dirs.logDir, 'shards');
    for (const pid of processesWritingUnder(this.root)) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${pid}/fd/1`);
      } catch {
        continue;
      }
      if (!target.startsWith(`${shardLogs}/`)) continue;
      const shard = target.slice(shardLogs.length + 1).replace(/\.log(\.\d+)?$/, '');
      const pgid = procInfo(pid)?.pgid;
      if (pgid === undefined) continue;
      const set = out.get(shard) ?? new Set<number>();
      set.add(pgid);
      out.set(shard, set);
    }
    return out;
  }

  assertOneEnginePerShard(): void {
    for (const [shard, groups] of this.enginesPerShard()) {
      assert.ok(groups.size <= 1, `shard ${shard} has ${groups.size} engines (process groups ${[...groups].join(', ')})`);
    }
  }

  /** The last thing the agent said about each shard: a status, or its listing in a Register. */
  lastReports(): Map<string, { state: ShardState; error: string; pid: number }> {
    const out = new Map<string, { state: ShardState; error: string; pid: number }>();
    for (const m of this.received) {
      if (m.msg.case === 'register') {
        const listed = new Set(m.msg.value.runningShards.map((r) => r.shardId));
        for (const r of m.msg.value.runningShards) out.set(r.shardId, { state: r.state, error: '', pid: r.pid });
        // Not listed on re-registration: the agent says it is not running.
        for (const [id, r] of out) if (!listed.has(id) && !isTerminal(r.state)) out.set(id, { state: S.UNSPECIFIED, error: 'not listed in Register', pid: 0 });
      } else if (m.msg.case === 'shard') {
        const s = m.msg.value;
        out.set(s.shardId, { state: s.state, error: s.error, pid: s.pid });
      }
    }
    return out;
  }

  /**
   * The campaign's invariants, checked at the end of every scenario:
   * no shard with two engines; every engine that should still serve does,
   * with its pid unchanged; every shard touched ended READY, STOPPED on
   * purpose, or FAILED with a reason; and nothing else is left running.
   * Returns the number of leaked processes (also asserted to be zero).
   */
  async assertInvariants(): Promise<number> {
    this.assertOneEnginePerShard();
    for (const e of this.healthy) {
      assert.ok(isRunning(e.pid), `healthy engine of ${e.shardId} (pid ${e.pid}) was killed`);
      // fetch says only "fetch failed"; its cause (ECONNREFUSED, ECONNRESET...) is what tells a port lost from a hung engine.
      const res = await fetch(`http://127.0.0.1:${e.port}/health`).catch((err: unknown) => ({ status: `${String(err)} (${String((err as { cause?: unknown }).cause)})` }));
      assert.equal(res.status, 200, `healthy engine of ${e.shardId} (pid ${e.pid}, port ${e.port}) stopped answering /health: ${res.status}`);
    }
    const reports = this.lastReports();
    for (const id of this.shards) {
      const r = reports.get(id);
      assert.ok(r, `shard ${JSON.stringify(id)} was never reported`);
      const ok =
        r.state === S.READY ||
        (r.state === S.FAILED && r.error !== '') ||
        (r.state === S.STOPPED && this.stoppedOnPurpose.has(id));
      assert.ok(ok, `shard ${JSON.stringify(id)} ended ${S[r.state]}${r.error ? ` (${r.error})` : ''}, not READY or FAILED with a reason`);
      if (this.expectFailed.has(id)) assert.equal(r.state, S.FAILED, `shard ${JSON.stringify(id)} should have been refused`);
    }
    const leaked = this.leakedProcesses();
    assert.deepEqual(leaked.map(describeProcess), [], 'processes leaked: running under the test directory, owned by no READY shard');
    return leaked.length;
  }

  /** Processes under the test's directories that no shard last reported READY owns. */
  leakedProcesses(): number[] {
    const allowed = new Set<number>();
    for (const [id, r] of this.lastReports()) {
      if (r.state === S.READY && r.pid > 0 && this.shards.has(id)) {
        const pgid = procInfo(r.pid)?.pgid;
        if (pgid !== undefined) allowed.add(pgid);
      }
    }
    const agentPid = this.agent?.pid;
    return processesWritingUnder(this.root).filter((pid) => pid !== agentPid && !allowed.has(procInfo(pid)?.pgid ?? -1));
  }

  /** Kills everything the scenario started (engines included) and removes its directory. */
  async close(): Promise<void> {
    for (const fn of this.cleanups.reverse()) {
      try {
        await fn();
      } catch {
        // Cleanup goes on: one failure must not leak the rest.
      }
    }
    await killEverything(this.root);
    rmSync(this.root, { recursive: true, force: true });
  }
}

export function isTerminal(state: ShardState): boolean {
  return state === S.STOPPED || state === S.FAILED || state === S.EXITED;
}

function describeProcess(pid: number): string {
  let cmd = '';
  try {
    cmd = readCmdline(pid).join(' ').slice(0, 120);
  } catch {
    // Gone meanwhile: the pid alone says enough.
  }
  return `${pid} ${cmd}`;
}

/** argv of a running process, exactly as the kernel holds it. */
export function readCmdline(pid: number): string[] {
  const parts = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  if (parts.at(-1) === '') parts.pop();
  return parts;
}

export async function health(port: number): Promise<number> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) })).status;
  } catch {
    return 0;
  }
}

/**
 * Requests to an engine for as long as it runs: what a router does while
 * the agent or the control plane is beaten on. Each failure is a request a
 * user saw fail.
 */
export function startTraffic(port: number, model = 'm'): { stop(): Promise<{ ok: number; failed: number }> } {
  let running = true;
  let ok = 0;
  let failed = 0;
  const loop = (async () => {
    while (running) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, prompt: 'hello', max_tokens: 4 }),
          signal: AbortSignal.timeout(5000),
        });
        await res.text();
        if (res.status === 200) ok++;
        else failed++;
      } catch {
        failed++;
      }
      await sleep(20);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { ok, failed };
    },
  };
}

export { freePort, isRunning, processesWritingUnder, until, sleep };

/** Runs one scenario in a fresh harness: the scenario, then the invariants, then cleanup whatever happened. */
export async function runScenario(
  scenario: Scenario,
): Promise<{ outcome: ScenarioOutcome; leaked: number }> {
  const h = new FaultHarness(scenario.name);
  let failed = false;
  try {
    const outcome = await scenario.run(h);
    const leaked = await h.assertInvariants();
    return { outcome, leaked };
  } catch (err) {
    failed = true;
    if (err instanceof Error) Object.assign(err, { leaked: h.leakedProcesses().length });
    // What the agent said last is usually the explanation.
    const tail = (h.agent?.logs() ?? [])
      .filter((r) => r.level !== 'debug' && r.level !== 'trace')
      .slice(-15)
      .map((r) => `  ${String(r.msg)}${r.shard ? ` shard=${String(r.shard)}` : ''}${r.err ? ` err=${String(r.err)}` : ''}${r.why ? ` why=${String(r.why)}` : ''}`);
    if (err instanceof Error && tail.length > 0) err.message += `\nagent log (last lines):\n${tail.join('\n')}`;
    throw err;
  } finally {
    // A cleanup that fails after the scenario failed must not hide why the scenario failed.
    await h.close().catch((err: unknown) => {
      if (!failed) throw err;
    });
  }
}

export interface Scenario {
  /** Short id, used in the soak table and on the command line. */
  name: string;
  /** What it shows, as a behaviour sentence (the vitest title). */
  title: string;
  /** Generous bound for one run. */
  timeoutMs: number;
  /** Runs in the soak per --count (default 1): the agent-kill scenarios take 2.5, 50 runs at --count 20 as issue 9 asks. */
  soakWeight?: number;
  /** Runs in `npm test` (default 1): timing-dependent scenarios get 2. */
  testRuns?: number;
  run(h: FaultHarness): Promise<ScenarioOutcome>;
}
