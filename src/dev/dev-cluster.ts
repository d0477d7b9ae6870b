import { readFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { ControlPlane } from '../control/control-plane.js';
import type { Deployment } from '../control/deployment.js';
import type { NodeView } from '../control/node-view.js';
import type { ReplicaView } from '../control/replica-view.js';
import { errorMessage, failure } from '../lib/errors.js';
import { isTerminal } from '../lib/shard-states.js';
import type { Logger } from '../lib/logger.js';
import { DEV_NODE_ID, devAgentConfigYaml } from './dev-agent-config-yaml.js';
import type { DevDirs } from './dev-dirs.js';
import type { GpuSource } from './find-gpu-source.js';
import { type KilledEngine, killRecordedEngines, waitEnginesGone } from './kill-recorded-engines.js';
import { type DevAgentProcess, spawnDevAgent } from './spawn-dev-agent.js';

/** How long every shard gets to be reported STOPPED: the agent's stop_grace (3s) plus slack. */
export const STOP_SHARDS_TIMEOUT_MS = 10_000;
/** How long SIGKILLed engines get to disappear before dev up says some survived. */
export const KILLED_ENGINES_TIMEOUT_MS = 5_000;
/** How often waits look at the control plane; its state changes between events too (backoff timers). */
const POLL_MS = 100;
/** Lines of the agent's log quoted when it exits unexpectedly. */
const AGENT_LOG_TAIL_LINES = 5;

/**
 * new → starting → ready → stopping → stopped; changed only in #setPhase.
 * stopping is entered from any earlier phase: a failed or interrupted start
 * is cleaned up exactly like a Ctrl-C after ready.
 */
export type DevClusterPhase = 'new' | 'starting' | 'ready' | 'stopping' | 'stopped';

export interface DevClusterOptions {
  deployment: Deployment;
  gpus: GpuSource;
  dirs: DevDirs;
  /** The control plane's port on 127.0.0.1; 0 picks a free one. */
  port: number;
  /** Ports the control plane hands to shards (see findShardPorts). */
  shardPorts: [number, number];
  /** Level of the control plane's and the agent's log files. */
  logLevel: string;
  logger: Logger;
  /** --engine vllm: the vLLM double's command and dev up's hub (devAgentConfigYaml). */
  vllmDouble?: { command: string; hubUrl: string };
  /** The wait before a failed replica is placed again, doubling while it keeps failing; DEV_RETRY_BACKOFF_MS when unset. */
  retryBackoffMs?: number;
}

/** dev up's first wait before placing a failed replica again: short, so a newcomer sees it recover. */
export const DEV_RETRY_BACKOFF_MS = 2_000;

export interface DevStopReport {
  /** Shards the agent reported stopped. */
  stopped: string[];
  /** Shards it did not, left for the backstop. */
  notStopped: string[];
  agentExit?: { exitCode: number | null; signal: NodeJS.Signals | null };
  /** Engines the backstop had to SIGKILL (empty when the agent stopped them all). */
  killed: KilledEngine[];
  /** Processes that survived even SIGKILL (uninterruptible sleep); nothing more can be done from here. */
  survivors: boolean;
}

/**
 * One machine's whole llmgw: the reference control plane in this process,
 * one real agent as a child process, and the engines the agent starts. It
 * owns their order of stopping: shards through the control plane first (the
 * way production stops them), then the agent, then, as a backstop, any
 * engine still recorded in the agent's state directory.
 */
export class DevCluster {
  readonly #opts: DevClusterOptions;
  readonly #log: Logger;
  readonly #cp: ControlPlane;
  #phase: DevClusterPhase = 'new';
  #url?: string;
  #agent?: DevAgentProcess;
  #stopped?: Promise<DevStopReport>;

  constructor(opts: DevClusterOptions) {
    this.#opts = opts;
    this.#log = opts.logger;
    // One node: nothing to wait for before placing, and a replica that
    // failed is retried soon, so a newcomer sees it recover.
    this.#cp = new ControlPlane({ deployment: opts.deployment, placementDelayMs: 0, retryBackoffMs: opts.retryBackoffMs ?? DEV_RETRY_BACKOFF_MS, portRange: opts.shardPorts, logger: opts.logger });
  }

  get phase(): DevClusterPhase {
    return this.#phase;
  }

  #setPhase(to: DevClusterPhase): void {
    this.#log.info({ from: this.#phase, to }, 'dev cluster phase changed');
    this.#phase = to;
  }

  get controlPlane(): ControlPlane {
    return this.#cp;
  }

  get url(): string | undefined {
    return this.#url;
  }

  get agent(): DevAgentProcess | undefined {
    return this.#agent;
  }

  async startControlPlane(): Promise<string> {
    if (this.#phase !== 'new') throw failure(`cannot start: the dev cluster is ${this.#phase}`);
    this.#setPhase('starting');
    this.#url = (await this.#cp.listen({ host: '127.0.0.1', port: this.#opts.port })).url;
    return this.#url;
  }

  /** Writes the agent's configuration and starts it against the control plane. */
  startAgent(): DevAgentProcess {
    if (!this.#url) throw failure('internal: start the control plane before the agent');
    const { dirs, gpus, logLevel, vllmDouble } = this.#opts;
    const double = vllmDouble ? { ...vllmDouble, modelsDir: dirs.modelsDir } : undefined;
    writeFileSync(dirs.agentConfig, devAgentConfigYaml({ server: this.#url, dirs, gpus, logLevel, ...(double ? { vllmDouble: double } : {}) }), { mode: 0o600 });
    // The fake nvidia-smi shows what the vLLM double holds: a sleep is seen to free it.
    const env = double && gpus.kind === 'fake' ? { ...gpus.env, LLMGW_FAKE_GPU_USAGE_DIR: dirs.gpuUsageDir } : gpus.env;
    this.#agent = spawnDevAgent({ configPath: dirs.agentConfig, logPath: dirs.agentLog, env });
    this.#log.info({ pid: this.#agent.pid, config: dirs.agentConfig }, 'agent started');
    return this.#agent;
  }

  /** Resolves with the dev node once its agent has registered. */
  async waitForNode(signal: AbortSignal, timeoutMs: number): Promise<NodeView> {
    let node: NodeView | undefined;
    await this.#until(
      () => {
        node = this.#cp.nodes().find((n) => n.id === DEV_NODE_ID && n.connected);
        return node !== undefined;
      },
      'the agent to register',
      signal,
      timeoutMs,
    );
    return node as NodeView;
  }

  /** Resolves once `done(replicas)` holds; fails early when the agent exits, with why. */
  async waitForReplicas(done: (replicas: ReplicaView[]) => boolean, what: string, signal: AbortSignal, timeoutMs: number): Promise<ReplicaView[]> {
    await this.#until(() => done(this.#cp.replicas()), what, signal, timeoutMs);
    return this.#cp.replicas();
  }

  /** Shard ids the agent has reported on (STARTING or later). */
  reportedShards(): Set<string> {
    return new Set(this.#cp.nodes().flatMap((n) => n.shards.map((s) => s.shardId)));
  }

  async #until(check: () => boolean, what: string, signal: AbortSignal, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      signal.throwIfAborted();
      if (this.#agent?.exit) throw failure(`the agent exited (${describeExit(this.#agent.exit)}) while waiting for ${what}${this.#agentLogTail()}`);
      if (Date.now() > deadline) {
        const why = this.#cp
          .replicas()
          .map((r) => r.lastError && `${r.id}: ${r.lastError}`)
          .filter(Boolean)
          .join('; ');
        throw failure(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for ${what}${why ? ` (${why})` : ''}; the logs are in ${this.#opts.dirs.root}`);
      }
      await sleep(POLL_MS, undefined, { signal }).catch(() => {});
    }
  }

  #agentLogTail(): string {
    try {
      const lines = readFileSync(this.#opts.dirs.agentLog, 'utf8').trimEnd().split('\n').slice(-AGENT_LOG_TAIL_LINES);
      return `; the end of its log ${this.#opts.dirs.agentLog}:\n${lines.join('\n')}`;
    } catch (err) {
      return `; its log ${this.#opts.dirs.agentLog} is unreadable: ${errorMessage(err)}`;
    }
  }

  markReady(): void {
    this.#setPhase('ready');
  }

  /**
   * Stops everything, in order, and never throws: every step runs whatever
   * the one before it did, since a step skipped here is a process left
   * behind. Repeated calls share the first.
   */
  stop(progress: (line: string) => void = () => {}): Promise<DevStopReport> {
    this.#stopped ??= this.#stop(progress);
    return this.#stopped;
  }

  async #stop(progress: (line: string) => void): Promise<DevStopReport> {
    this.#setPhase('stopping');
    const report: DevStopReport = { stopped: [], notStopped: [], killed: [], survivors: false };
    try {
      if (this.#agent && !this.#agent.exit) {
        // Only what still runs: a crash loop leaves a FAILED record per generation.
        const shards = new Set(this.#cp.nodes().flatMap((n) => n.shards.filter((s) => !isTerminal(s.state)).map((s) => s.shardId)));
        if (shards.size > 0) progress(`stopping ${shards.size} shard(s) through the control plane`);
        const r = await this.#cp.stopAllShards({ timeoutMs: STOP_SHARDS_TIMEOUT_MS });
        report.stopped = r.stopped;
        report.notStopped = r.remaining;
        if (r.stopped.length > 0) progress(`stopped ${r.stopped.join(', ')}`);
        if (r.remaining.length > 0) progress(`not reported stopped: ${r.remaining.join(', ')}; killing them below`);
      }
    } catch (err) {
      this.#log.error({ err: errorMessage(err) }, 'stopping shards failed');
    }
    try {
      if (this.#agent) {
        report.agentExit = await this.#agent.stop();
        progress(`agent stopped (${describeExit(report.agentExit)})`);
      }
    } catch (err) {
      this.#log.error({ err: errorMessage(err) }, 'stopping the agent failed');
    }
    try {
      report.killed = killRecordedEngines(this.#opts.dirs);
      if (report.killed.length > 0) {
        progress(`killed ${report.killed.length} engine process(es) the agent left: ${[...new Set(report.killed.map((k) => k.shardId))].join(', ')}`);
        report.survivors = !(await waitEnginesGone(report.killed, KILLED_ENGINES_TIMEOUT_MS));
      }
    } catch (err) {
      this.#log.error({ err: errorMessage(err) }, 'killing leftover engines failed');
    }
    await this.#cp.close();
    this.#setPhase('stopped');
    return report;
  }

  /**
   * The second Ctrl-C: no more waiting. SIGKILL to the agent and to every
   * engine recorded, synchronously; the process exits right after.
   */
  killNow(): KilledEngine[] {
    this.#agent?.killNow();
    return killRecordedEngines(this.#opts.dirs);
  }
}

function describeExit(e: { exitCode: number | null; signal: NodeJS.Signals | null }): string {
  if (e.signal) return `signal ${e.signal}`;
  return e.exitCode === null ? 'could not be started' : `exit code ${e.exitCode}`;
}
