import { create } from '@bufbuild/protobuf';
import { durationMs } from '@bufbuild/protobuf/wkt';
import {
  type ControlMessage,
  type Inventory,
  ShardState,
  type ShardStatus,
  ShardStatusSchema,
  type StartShard,
  type StopShard,
} from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { readProcStat } from '../lib/proc-stat.js';
import { assertShardId, isValidShardId } from '../lib/shard-id.js';
import { isTerminal } from '../lib/shard-states.js';
import type { AgentMetrics } from './agent-metrics.js';
import type { AgentConfig } from './config/agent-config.js';
import type { ConnectionStatus } from './connection-state.js';
import { ControlPlaneConnection } from './control-plane-connection.js';
import type { GpuMemorySampler } from './discovery/gpu-memory-sampler.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import type { ValidationContext } from './engines/engine.js';
import { isPortFree } from './engines/is-port-free.js';
import { InventoryWatcher } from './inventory-watcher.js';
import type { Outbox } from './outbox.js';
import { buildHeartbeat, buildRegister, describeNode, type NodeDescription } from './register-message.js';
import { refusedStatus, statusFromSnapshot } from './shard-report.js';
import { StatusReporter } from './status-reporter.js';
import type { Orphan, ShardSnapshot, Supervisor } from './supervisor/supervisor.js';

export interface AgentOptions {
  config: AgentConfig;
  version: string;
  logger: Logger;
  supervisor: Supervisor;
  engines: EngineRegistry;
  sampler: GpuMemorySampler;
  /** Reads the node's hardware; never throws for hardware problems. */
  discover: (signal: AbortSignal) => Promise<Inventory>;
  metrics?: AgentMetrics;
}

export type AdoptOutcomeKind = 'adopted' | 'killed' | 'cleaned' | 'already-supervised' | 'error';

export interface AdoptResultView {
  shardId: string;
  outcome: AdoptOutcomeKind;
  pid: number;
  reason: string;
}

/** A profile without startup_timeout gets this long to load (large models take minutes). */
export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

/**
 * The node agent: hardware discovery, engine recovery, and one Connect
 * stream to the control plane for as long as it runs. It assembles the parts
 * that do each (ControlPlaneConnection, StatusReporter, InventoryWatcher, the
 * Supervisor) and answers the admin socket from them.
 *
 * Two scopes are kept apart. The `signal` given to run() is the agent's own
 * life: aborting it ends the stream and the timers, and leaves every engine
 * running, because the router talks to engines directly and an agent restart
 * must not interrupt served traffic. Stopping a shard is a separate, explicit
 * act (StopShard, or `ctl`), never a side effect of the agent going away.
 */
export class Agent {
  readonly startedAtMs = Date.now();
  private readonly log: Logger;
  private readonly node: NodeDescription;
  private readonly reporter: StatusReporter;
  private readonly inventoryWatcher: InventoryWatcher;
  private readonly connection: ControlPlaneConnection;
  /** Starts between receipt and launch: a repeat or a stop waits for them. */
  private readonly launching = new Map<string, Promise<void>>();
  /** The orphan scan in progress, if any; scans queue behind it. */
  private adopting: Promise<void> = Promise.resolve();

  constructor(private readonly opts: AgentOptions) {
    this.log = opts.logger;
    const c = opts.config;
    this.node = describeNode(c, opts.version);
    this.reporter = new StatusReporter({ nodeId: c.nodeId, metrics: opts.metrics });
    this.inventoryWatcher = new InventoryWatcher({
      discover: opts.discover,
      stateDir: c.supervisor.stateDir,
      intervalMs: c.discovery.intervalMs,
      logger: this.log,
      onChange: (inventory) => this.reporter.send({ case: 'inventory', value: inventory }),
    });
    this.connection = new ControlPlaneConnection({
      config: c,
      logger: this.log,
      metrics: opts.metrics,
      session: {
        register: () => buildRegister(this.node, this.inventory, opts.supervisor.list()),
        heartbeat: () => this.heartbeat(),
        onOpen: (outbox) => this.reporter.onSessionOpen(outbox),
        onClosed: () => this.reporter.onSessionClosed(),
        onControlMessage: (m, outbox) => this.onControlMessage(m, outbox),
      },
    });
    opts.supervisor.on('transition', (t) => this.reporter.onTransition(t));
  }

  get nodeId(): string {
    return this.opts.config.nodeId;
  }

  get version(): string {
    return this.opts.version;
  }

  connectionStatus(): ConnectionStatus {
    return this.connection.status();
  }

  currentInventory(): Inventory {
    return this.inventoryWatcher.current();
  }

  shards(): ShardSnapshot[] {
    return this.opts.supervisor.list();
  }

  /** One supervised shard; undefined for an unknown or invalid id. */
  shard(id: string): ShardSnapshot | undefined {
    return isValidShardId(id) ? this.opts.supervisor.get(id) : undefined;
  }

  /** The last lines of a shard's log. */
  tailLog(id: string, lines: number): Promise<string[]> {
    return this.opts.supervisor.tailLog(id, lines);
  }

  /**
   * A supervised shard's last `backlogLines` log lines (the first batch), then
   * its new ones; ends when it is removed, on `signal`, or when the agent stops.
   */
  followLog(id: string, signal: AbortSignal, backlogLines = 0): AsyncIterable<string[]> {
    return this.opts.supervisor.followLog(id, signal, backlogLines);
  }

  /** Requests a shard's engine is working on; undefined when it cannot tell. */
  inFlight(id: string): Promise<number | undefined> {
    return this.opts.supervisor.inFlight(id);
  }

  /**
   * Runs until `signal` aborts: recovers engines a previous agent left, reads
   * the hardware, then holds a session to the control plane for ever,
   * reconnecting with backoff. Resolves once the stream is closed; engines
   * are left running.
   */
  async run(signal: AbortSignal, hooks: { onFirstAttempt?: () => void } = {}): Promise<void> {
    // Recovery first and without waiting on hardware discovery: adopted
    // engines settle in the background and must not wait for nvidia-smi.
    await this.recoverOrphans();
    const stopWatching = () => {
      this.inventoryWatcher.stop();
      this.opts.sampler.close();
    };
    try {
      await this.inventoryWatcher.start(signal);
      this.opts.sampler.start();
      await this.connection.run(signal, { onFirstAttempt: hooks.onFirstAttempt, onStopping: stopWatching });
    } finally {
      // Also when the connection could not start (an unreadable certificate):
      // a timer or an nvidia-smi loop left behind would keep the process alive.
      stopWatching();
    }
  }

  /** The inventory as last scanned (validation checks a start against it). */
  private get inventory(): Inventory {
    return this.inventoryWatcher.current();
  }

  private heartbeat() {
    const hb = buildHeartbeat(this.nodeId, this.opts.sampler.latest(), this.inventory);
    for (const [i, mb] of hb.gpuMemoryUsedMb.entries()) this.opts.metrics?.gpuMemoryUsed.set({ gpu: String(i) }, mb);
    return hb;
  }

  /** A shard status for the control plane: sent now, or kept until the next session (StatusReporter). */
  private report(status: ShardStatus): void {
    this.reporter.report(status);
  }

  private onControlMessage(m: ControlMessage, _outbox: Outbox): void {
    this.opts.metrics?.messagesReceived.inc({ type: m.msg.case ?? 'unknown' });
    switch (m.msg.case) {
      case 'start':
        // In the background: loading takes minutes, and the stream must keep
        // carrying heartbeats and other commands meanwhile.
        void this.startShard(m.msg.value);
        return;
      case 'stop':
        void this.stopShard(m.msg.value);
        return;
      case 'drain':
        this.handleDrainCommand(m.msg.value.shardId);
        return;
      case 'ack':
        if (!m.msg.value.ok) {
          this.log.warn({ messageId: String(m.msg.value.messageId), err: m.msg.value.error }, 'control plane rejected a message');
        }
        return;
      default:
        this.log.warn({ messageId: String(m.messageId) }, 'control message with no command; ignored');
    }
  }

  /**
   * Validates, launches, and waits for a shard to serve. Idempotent by shard
   * id: the control plane retries, and a repeat must never make a second
   * process, so it only reports the current state.
   */
  async startShard(spec: StartShard): Promise<void> {
    const id = spec.shardId;
    const log = this.log.child({ shard: id, replica: spec.replicaId });
    if (!isValidShardId(id)) {
      this.report(refusedStatus(this.nodeId, spec, `invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: use 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit`));
      return;
    }
    const pending = this.launching.get(id);
    const existing = this.opts.supervisor.get(id);
    if (pending || (existing && !isTerminal(existing.state))) {
      log.info('start repeated for a shard that is already here; reporting its state');
      if (pending) await pending;
      const now = this.opts.supervisor.get(id);
      if (now) this.report(statusFromSnapshot(this.nodeId, now));
      return;
    }

    let launched: ShardSnapshot | undefined;
    const launch = (async () => {
      try {
        const engine = this.opts.engines.get(spec.profile?.engine ?? '');
        // Validate before launching: an engine that refuses a profile does so
        // after minutes of model loading; here it costs nothing.
        await engine.validate(spec, this.validationContext(id));
        const plan = engine.command(spec);
        const { shard, created } = await this.opts.supervisor.start(spec, plan, {
          servesHttp: engine.servesHttp(spec),
          inFlightMetric: engine.inFlightMetric,
        });
        if (!created) {
          this.report(statusFromSnapshot(this.nodeId, shard));
          return;
        }
        launched = shard;
      } catch (err) {
        log.warn({ err: errorMessage(err) }, 'refused to start a shard');
        this.report(refusedStatus(this.nodeId, spec, errorMessage(err)));
      }
    })();
    this.launching.set(id, launch);
    try {
      await launch;
    } finally {
      this.launching.delete(id);
    }
    if (launched) await this.settle(launched, spec.profile?.startupTimeout ? durationMs(spec.profile.startupTimeout) : DEFAULT_STARTUP_TIMEOUT_MS);
  }

  /**
   * Brings a launched or adopted shard to READY, by the same two paths for
   * both: a rank that serves HTTP is health-checked, a worker is judged by
   * staying alive. Failures are reported by the supervisor's transitions; an
   * engine that will not answer is never killed here, because the control
   * plane owns that decision and already has a timeout for it.
   */
  private async settle(shard: ShardSnapshot, timeoutMs: number): Promise<void> {
    const sup = this.opts.supervisor;
    const profile = shard.spec.profile;
    try {
      if (shard.servesHttp) {
        await sup.waitReady(shard.shardId, {
          baseUrl: `http://127.0.0.1:${shard.spec.httpPort}`,
          servedModelName: profile?.servedModelName || profile?.model || '',
          timeoutMs,
        });
      } else {
        await sup.waitAlive(shard.shardId);
      }
    } catch (err) {
      this.log.warn({ shard: shard.shardId, replica: shard.replicaId, adopted: shard.adopted, err: errorMessage(err) }, 'shard did not become ready');
    }
  }

  private validationContext(shardId: string): ValidationContext {
    // A shard holds its GPUs while its engine may run, whatever its state: a
    // FAILED one that never became ready is left running until it is stopped,
    // and a second engine on its GPUs would fail after minutes of loading.
    const holding = this.opts.supervisor.list().filter((s) => !isTerminal(s.state) || s.running);
    const heldGpus = new Map<number, string>();
    for (const s of holding) if (s.shardId !== shardId) for (const g of s.spec.gpuIndices) heldGpus.set(g, s.shardId);
    const shardGroups = new Set(holding.map((s) => s.pid));
    // A compute process is ours when it is in the process group of one of our
    // engines (the GPU is usually held by a worker child, not the pid we started).
    const foreignProcesses = this.inventory.processes.filter((p) => {
      const stat = readProcStat(p.pid);
      return !(stat && shardGroups.has(stat.pgrp)) && !shardGroups.has(p.pid);
    });
    return { inventory: this.inventory, heldGpus, foreignProcesses, isPortFree: (port) => isPortFree(port) };
  }

  /** Stops a shard: every process of it gone, then STOPPED is reported and its state forgotten. */
  async stopShard(m: Pick<StopShard, 'shardId' | 'grace'>): Promise<void> {
    const id = m.shardId;
    if (!isValidShardId(id)) {
      this.report(refusedStatus(this.nodeId, { shardId: id, replicaId: '' }, `stop refused: invalid shard id ${JSON.stringify(String(id).slice(0, 40))}`));
      return;
    }
    // A start still validating or launching finishes first, so that a stop
    // never races it and leaves an engine behind.
    await this.launching.get(id);
    const sup = this.opts.supervisor;
    const shard = sup.get(id);
    if (!shard) {
      // Nothing runs under that id: report it stopped, which is the truth.
      this.report(create(ShardStatusSchema, { nodeId: this.nodeId, shardId: id, state: ShardState.STOPPED }));
      return;
    }
    try {
      const after = await sup.stop(id, { graceMs: m.grace ? durationMs(m.grace) : undefined });
      sup.remove(id);
      // A shard already FAILED or EXITED makes no transition when stopped, but
      // the control plane waits for STOPPED before it hands out its GPUs.
      if (after.state !== ShardState.STOPPED) {
        this.report(create(ShardStatusSchema, { nodeId: this.nodeId, replicaId: after.replicaId, shardId: id, state: ShardState.STOPPED, pid: after.pid }));
      }
    } catch (err) {
      this.log.error({ shard: id, err: errorMessage(err) }, 'stopping a shard failed');
      this.report(refusedStatus(this.nodeId, shard, `stop failed: ${errorMessage(err)}`));
    }
  }

  /**
   * Marks a running shard DRAINING (reported through its transition, so the
   * control plane routes elsewhere). Throws when the shard cannot be drained.
   */
  drainShard(id: string): ShardSnapshot {
    assertShardId(id);
    const shard = this.opts.supervisor.get(id);
    if (!shard || isTerminal(shard.state)) throw failure(`no running shard ${JSON.stringify(id)} on this node`);
    return this.opts.supervisor.drain(id);
  }

  /**
   * A DrainShard from the control plane. A refusal says why in a status
   * report: FAILED for a shard that is not here, but a shard still loading is
   * reported with its own state, never as FAILED, which would get a healthy
   * engine replaced.
   */
  private handleDrainCommand(id: string): void {
    try {
      this.drainShard(id);
    } catch (err) {
      const why = `drain refused: ${errorMessage(err)}`;
      const shard = isValidShardId(id) ? this.opts.supervisor.get(id) : undefined;
      this.log.warn({ shard: id, err: why }, 'refused a drain');
      if (shard && !isTerminal(shard.state)) this.report(create(ShardStatusSchema, { ...statusFromSnapshot(this.nodeId, shard), error: why }));
      else this.report(refusedStatus(this.nodeId, { shardId: id, replicaId: shard?.replicaId ?? '' }, why));
    }
  }

  /**
   * Takes back engines a previous agent left running. Dead ones have their
   * state cleaned; live ones that cannot be identified are killed, because a
   * process holding GPUs that nothing can describe is worse than none
   * (placement would hand those GPUs out again); identified ones are adopted
   * and settled in the background, so that registration is not delayed.
   */
  recoverOrphans(): Promise<AdoptResultView[]> {
    // One scan at a time: `ctl adopt` during the start-up scan would judge the
    // same state files twice and try to adopt an engine already taken.
    const scan = this.adopting.then(() => this.scanOrphans());
    this.adopting = scan.then(
      () => {},
      () => {},
    );
    return scan;
  }

  /**
   * `ctl adopt`: rescans now, and lists the shards already supervised too, so
   * that the operator sees every engine the state directory describes.
   */
  async adoptNow(): Promise<AdoptResultView[]> {
    const results = await this.recoverOrphans();
    const taken = new Set(results.map((r) => r.shardId));
    for (const s of this.opts.supervisor.list()) {
      if (isTerminal(s.state) || taken.has(s.shardId)) continue;
      results.push({ shardId: s.shardId, outcome: 'already-supervised', pid: s.pid, reason: '' });
    }
    return results.sort((a, b) => a.shardId.localeCompare(b.shardId));
  }

  private async scanOrphans(): Promise<AdoptResultView[]> {
    const sup = this.opts.supervisor;
    let orphans: Orphan[];
    try {
      orphans = await sup.findOrphans();
    } catch (err) {
      this.log.warn({ err: errorMessage(err) }, 'scanning for engines left by a previous agent failed');
      return [{ shardId: '', outcome: 'error', pid: 0, reason: errorMessage(err) }];
    }
    const results: AdoptResultView[] = [];
    for (const o of orphans) {
      const log = this.log.child({ shard: o.shardId, pid: o.pid });
      try {
        // Either way the control plane is told, with the reason: Register
        // lists only what runs, and a shard that vanished from the list
        // without a word leaves an operator nothing to go on.
        if (!o.alive) {
          await sup.killOrphan(o);
          log.info({ why: o.reason }, 'cleaned the state of an engine that is gone');
          results.push({ shardId: o.shardId, outcome: 'cleaned', pid: o.pid, reason: o.reason });
          this.report(refusedStatus(this.nodeId, o, `engine ended while the agent was down: ${o.reason}`));
        } else if (!o.identified) {
          log.warn({ why: o.reason }, 'killing an engine that cannot be identified');
          await sup.killOrphan(o);
          results.push({ shardId: o.shardId, outcome: 'killed', pid: o.pid, reason: o.reason });
          this.report(refusedStatus(this.nodeId, o, `engine killed after an agent restart: it could not be identified (${o.reason})`));
        } else {
          const shard = sup.adopt(o);
          log.info({ replica: o.replicaId }, 'adopted a running engine');
          results.push({ shardId: o.shardId, outcome: 'adopted', pid: o.pid, reason: '' });
          void this.settle(shard, this.opts.config.adoptReadyTimeoutMs);
        }
      } catch (err) {
        log.warn({ err: errorMessage(err) }, 'recovering an engine failed');
        results.push({ shardId: o.shardId, outcome: 'error', pid: o.pid, reason: errorMessage(err) });
        this.report(refusedStatus(this.nodeId, o, `recovering the engine after an agent restart failed: ${errorMessage(err)}`));
      }
    }
    return results;
  }
}
