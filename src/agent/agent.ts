import { clone, create, equals } from '@bufbuild/protobuf';
import type { Duration } from '@bufbuild/protobuf/wkt';
import { ConnectError } from '@connectrpc/connect';
import {
  type ControlMessage,
  HeartbeatSchema,
  InventorySchema,
  type Inventory,
  RegisterSchema,
  ShardState,
  type ShardStatus,
  ShardStatusSchema,
  type StartShard,
  type StopShard,
  FabricAttachmentSchema,
} from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { resolveHostname, resolveMgmtAddr } from '../lib/node-identity.js';
import { readProcStat } from '../lib/proc-stat.js';
import { assertShardId, isValidShardId } from '../lib/shard-id.js';
import type { AgentConfig } from './config/agent-config.js';
import type { ConnectionPhase, ConnectionStatus } from './connection-state.js';
import { runSession } from './control-plane-session.js';
import { createControlPlaneTransport } from './control-plane-transport.js';
import type { GpuMemorySampler } from './discovery/gpu-memory-sampler.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import type { ValidationContext } from './engines/engine.js';
import type { Outbox } from './outbox.js';
import { reconnectDelayMs } from './reconnect-delay.js';
import { isTerminal, refusedStatus, runningShardFromSnapshot, statusFromSnapshot } from './shard-report.js';
import type { Orphan, ShardSnapshot, ShardTransition, Supervisor } from './supervisor/supervisor.js';
import type { AgentMetrics } from './agent-metrics.js';
import { isPortFree } from './engines/is-port-free.js';
import { readInventoryCache, writeInventoryCache } from './inventory-cache.js';

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

/** The shortest HTTP/2 ping period and timeout, whatever the heartbeat. */
const PING_FLOOR_MS = 1000;
/** A session answered and open this long was a working one: its end starts the backoff afresh. */
const STABLE_SESSION_MS = 5000;

/** A profile without startup_timeout gets this long to load (large models take minutes). */
export const DEFAULT_STARTUP_TIMEOUT_MS = 10 * 60_000;

/**
 * The node agent: hardware discovery, engine recovery, and one Connect
 * stream to the control plane for as long as it runs.
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
  private inventory: Inventory = create(InventorySchema, {});
  private outbox: Outbox | undefined;
  private messageId = 0n;
  private connection: ConnectionStatus;
  /** Reports produced while no stream was open, latest per shard, sent after the next Register. */
  private readonly unsent = new Map<string, ShardStatus>();
  /** Starts between receipt and launch: a repeat or a stop waits for them. */
  private readonly launching = new Map<string, Promise<void>>();
  private readonly hostname: string;
  private readonly mgmtAddr: string;
  private timers: NodeJS.Timeout[] = [];
  private scanning: Promise<void> | undefined;
  /** The orphan scan in progress, if any; scans queue behind it. */
  private adopting: Promise<void> = Promise.resolve();

  constructor(private readonly opts: AgentOptions) {
    this.log = opts.logger;
    const c = opts.config;
    this.hostname = resolveHostname(c.hostname);
    this.mgmtAddr = resolveMgmtAddr(c.mgmtAddr, c.mgmtInterface);
    this.connection = {
      phase: 'starting',
      server: c.server,
      protocol: c.protocol,
      connectedSinceMs: 0,
      attempt: 0,
      nextAttemptAtMs: 0,
      lastError: '',
    };
    opts.supervisor.on('transition', (t) => this.onTransition(t));
  }

  get nodeId(): string {
    return this.opts.config.nodeId;
  }

  get version(): string {
    return this.opts.version;
  }

  connectionStatus(): ConnectionStatus {
    return { ...this.connection };
  }

  currentInventory(): Inventory {
    return this.inventory;
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
   *
   * Reconnecting for ever is right for a node agent: a control-plane restart
   * or a partition must not need anyone to touch every GPU node.
   */
  async run(signal: AbortSignal, hooks: { onFirstAttempt?: () => void } = {}): Promise<void> {
    const c = this.opts.config;
    // Recovery first and without waiting on hardware discovery: adopted
    // engines settle in the background and must not wait for nvidia-smi.
    await this.recoverOrphans();
    const cached = readInventoryCache(c.supervisor.stateDir);
    if (cached) {
      // Register now with what this node was a moment ago; the fresh scan
      // runs alongside and is sent as an update if anything changed.
      this.inventory = cached;
      void this.rediscover(signal);
    } else {
      await this.rediscover(signal);
    }
    this.opts.sampler.start();
    this.timers.push(setInterval(() => void this.rediscover(signal), c.discovery.intervalMs));

    const transport = createControlPlaneTransport({
      server: c.server,
      protocol: c.protocol,
      tls: c.tls,
      pingIntervalMs: Math.max(PING_FLOOR_MS, 2 * c.heartbeatIntervalMs),
      pingTimeoutMs: Math.max(PING_FLOOR_MS, 2 * c.heartbeatIntervalMs),
    });

    let first = true;
    /** Failed attempts since the last stable session: what the backoff grows with. */
    let backoffAttempt = 0;
    /** Clean closes in a row of sessions that did not get stable. */
    let quickCloses = 0;
    while (!signal.aborted) {
      this.setConnection('connecting');
      if (first) {
        first = false;
        hooks.onFirstAttempt?.();
      }
      const startedMs = Date.now();
      const result = await runSession({
        transport,
        heartbeatIntervalMs: c.heartbeatIntervalMs,
        registerTimeoutMs: c.registerTimeoutMs,
        nextMessageId: () => ++this.messageId,
        signal,
        logger: this.log,
        callbacks: {
          register: () => this.buildRegister(),
          onOpen: (outbox) => this.onSessionOpen(outbox),
          onControlMessage: (m, outbox) => this.onControlMessage(m, outbox),
          heartbeat: () => this.buildHeartbeat(),
          onSent: (message, queuedMs) => {
            this.opts.metrics?.messagesSent.inc({ type: message.msg.case ?? 'unknown' });
            if (message.msg.case === 'heartbeat') this.opts.metrics?.heartbeatSendSeconds.observe(queuedMs / 1000);
          },
          onEstablished: () => {
            this.connection.attempt = 0;
            this.connection.lastError = '';
            this.setConnection('connected', { connectedSinceMs: Date.now() });
            this.opts.metrics?.connected.set(1);
          },
        },
      });
      this.outbox = undefined;
      this.opts.metrics?.connected.set(0);
      const outcome = result.outcome;
      if (outcome.kind === 'stopped' || signal.aborted) break;
      this.opts.metrics?.reconnects.inc();

      // Stable: answered and lived a while, or outlived the longest backoff.
      // Only that resets the backoff; an answer alone does not, or a control
      // plane that acks every Register and then drops the stream would be
      // retried at the base rate for ever.
      const livedMs = Date.now() - startedMs;
      const stable = (result.established && livedMs >= STABLE_SESSION_MS) || livedMs > c.reconnectMaxMs;
      let error: unknown;
      if (outcome.kind === 'closed') {
        quickCloses = stable ? 1 : quickCloses + 1;
        if (quickCloses === 1) {
          // The control plane closed the stream on purpose, as a restart does: come straight back.
          this.log.info('control plane closed the stream; reconnecting now');
          backoffAttempt = 0;
          this.connection.attempt = 0;
          continue;
        }
        // Closed again before the session got stable: a control plane that
        // ends every stream at once. Coming straight back each time was a
        // hot loop (about 240 streams a second, found by the fault campaign).
        error = new Error(`the control plane ended ${quickCloses} streams in a row soon after they opened`);
      } else {
        quickCloses = 0;
        error = outcome.error;
      }
      backoffAttempt = stable ? 1 : backoffAttempt + 1;
      this.connection.attempt = backoffAttempt;
      const delayMs = reconnectDelayMs(backoffAttempt, c.reconnectBaseMs, c.reconnectMaxMs);
      const why = describeStreamError(error);
      this.connection.lastError = why;
      this.setConnection('retrying', { nextAttemptAtMs: Date.now() + delayMs, connectedSinceMs: 0 });
      this.log.warn({ err: why, attempt: backoffAttempt, retryInMs: delayMs }, 'cannot reach the control plane; retrying');
      await sleep(delayMs, signal);
    }
    this.setConnection('stopping');
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.opts.sampler.close();
    this.setConnection('stopped');
  }

  private setConnection(phase: ConnectionPhase, fields: Partial<ConnectionStatus> = {}): void {
    const from = this.connection.phase;
    this.connection = { ...this.connection, ...fields, phase };
    if (phase !== 'retrying') this.connection.nextAttemptAtMs = 0;
    if (phase !== 'connected') this.connection.connectedSinceMs = phase === 'connecting' ? 0 : this.connection.connectedSinceMs;
    if (from !== phase) this.log.debug({ from, to: phase }, 'control-plane connection');
    if (phase === 'connected' && from !== 'connected') this.log.info({ server: this.connection.server }, 'connected to the control plane');
  }

  private buildRegister() {
    const c = this.opts.config;
    // Every registration lists what runs, not only the first: a reconnect may
    // be a control-plane restart, and it recovers the fleet from these lists.
    const running = this.opts.supervisor
      .list()
      .filter((s) => !isTerminal(s.state))
      .map((s) => runningShardFromSnapshot(s, this.mgmtAddr));
    return create(RegisterSchema, {
      nodeId: c.nodeId,
      hostname: this.hostname,
      mgmtAddr: this.mgmtAddr,
      version: this.opts.version,
      labels: c.labels,
      inventory: this.inventory,
      fabrics: c.fabrics.map((f) => create(FabricAttachmentSchema, f)),
      runningShards: running,
    });
  }

  private onSessionOpen(outbox: Outbox): void {
    this.outbox = outbox;
    // Terminal reports that happened while disconnected: Register lists only
    // what runs, so without these the control plane would not learn why.
    for (const status of this.unsent.values()) {
      if (isTerminal(status.state)) this.send(outbox, { case: 'shard', value: status });
    }
    this.unsent.clear();
  }

  private buildHeartbeat() {
    // Never waits: the sampler's nvidia-smi loop reports once per heartbeat
    // interval, and a slow one must not delay the stream.
    const latest = this.opts.sampler.latest();
    const used = latest.length > 0 ? latest : this.inventory.gpus.map((g) => g.memoryUsedMb);
    for (const [i, mb] of used.entries()) this.opts.metrics?.gpuMemoryUsed.set({ gpu: String(i) }, mb);
    return create(HeartbeatSchema, { nodeId: this.nodeId, gpuMemoryUsedMb: used });
  }

  private send(outbox: Outbox, msg: Parameters<Outbox['send']>[0]): void {
    // A failed write needs no handling here: the session ends with the
    // stream's error, and the next Register carries what matters.
    outbox.send(msg).catch(() => {});
  }

  private report(status: ShardStatus): void {
    const outbox = this.outbox;
    if (outbox) this.send(outbox, { case: 'shard', value: status });
    else this.unsent.set(status.shardId, status);
  }

  private onTransition(t: ShardTransition): void {
    const to = t.to;
    if (to === ShardState.FAILED || to === ShardState.EXITED) this.opts.metrics?.engineExits.inc({ state: ShardState[to] });
    this.report(statusFromSnapshot(this.nodeId, t.shard));
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

  /**
   * One scan at a time: a timer firing while nvidia-smi is still running (a
   * slow or hung driver, an interval shorter than the timeout) joins the scan
   * under way instead of starting another beside it.
   */
  private rediscover(signal: AbortSignal): Promise<void> {
    this.scanning ??= this.scan(signal).finally(() => {
      this.scanning = undefined;
    });
    return this.scanning;
  }

  private async scan(signal: AbortSignal): Promise<void> {
    try {
      const next = await this.opts.discover(signal);
      if (signal.aborted) return;
      const changed = !equals(InventorySchema, comparable(next), comparable(this.inventory));
      this.inventory = next;
      if (changed) {
        for (const w of next.warnings) this.log.warn({ warning: w }, 'discovery');
        writeInventoryCache(this.opts.config.supervisor.stateDir, next).catch((err: unknown) =>
          this.log.debug({ err: errorMessage(err) }, 'cannot cache the inventory; the next start scans in full'),
        );
        this.log.info({ gpus: next.gpus.length, hcas: next.hcas.length }, 'hardware changed; sending the new inventory');
        if (this.outbox) this.send(this.outbox, { case: 'inventory', value: next });
      }
    } catch (err) {
      if (signal.aborted) return; // shutting down: nothing failed
      this.log.warn({ err: errorMessage(err) }, 'rediscovery failed; keeping the last inventory');
    }
  }
}

function durationMs(d: Duration): number {
  return Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * One line for why a session failed, with the underlying cause: a refused
 * certificate arrives here, and an agent that cannot say why it is not
 * registering is one an operator cannot fix.
 */
export function describeStreamError(err: unknown): string {
  const base = err instanceof ConnectError ? err.rawMessage : errorMessage(err);
  const parts = [base];
  let cause: unknown = err instanceof Error ? err.cause : undefined;
  for (let depth = 0; cause && depth < 4; depth++) {
    const msg = errorMessage(cause);
    const code = (cause as { code?: unknown }).code;
    const text = typeof code === 'string' && !msg.includes(code) ? `${msg} (${code})` : msg;
    if (!parts.some((p) => p.includes(text))) parts.push(text);
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return parts.join(': ');
}

/** The inventory without readings that change every second, for change detection. */
function comparable(inv: Inventory): Inventory {
  const c = clone(InventorySchema, inv);
  for (const g of c.gpus) g.memoryUsedMb = 0;
  c.processes = [];
  return c;
}
