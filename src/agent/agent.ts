import { clone, create, equals } from '@bufbuild/protobuf';
import { ConnectError } from '@connectrpc/connect';
import {
  type ControlMessage,
  HeartbeatSchema,
  InventorySchema,
  type Inventory,
  RegisterSchema,
  ShardState,
  type ShardStatus,
  type StartShard,
  type StopShard,
  FabricAttachmentSchema,
} from '../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { resolveHostname, resolveMgmtAddr } from '../lib/node-identity.js';
import { isValidShardId } from '../lib/shard-id.js';
import { isTerminal } from '../lib/shard-states.js';
import type { AgentConfig } from './config/agent-config.js';
import type { ConnectionPhase, ConnectionStatus } from './connection-state.js';
import { runSession } from './control-plane-session.js';
import { createControlPlaneTransport } from './control-plane-transport.js';
import type { GpuMemorySampler } from './discovery/gpu-memory-sampler.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import type { Outbox } from './outbox.js';
import { reconnectDelayMs } from './reconnect-delay.js';
import { type AdoptResultView, RecoverEngines } from './recover-engines.js';
import { ShardCommands } from './shard-commands.js';
import { runningShardFromSnapshot, statusFromSnapshot } from './shard-report.js';
import type { ShardSnapshot, ShardTransition, Supervisor } from './supervisor/supervisor.js';
import type { AgentMetrics } from './agent-metrics.js';
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

export type { AdoptOutcomeKind, AdoptResultView } from './recover-engines.js';

/** The shortest HTTP/2 ping period and timeout, whatever the heartbeat. */
const PING_FLOOR_MS = 1000;
/** A session answered and open this long was a working one: its end starts the backoff afresh. */
const STABLE_SESSION_MS = 5000;

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
  private readonly commands: ShardCommands;
  private readonly recovery: RecoverEngines;
  private readonly hostname: string;
  private readonly mgmtAddr: string;
  private timers: NodeJS.Timeout[] = [];
  private scanning: Promise<void> | undefined;

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
    const report = (status: ShardStatus) => this.report(status);
    this.commands = new ShardCommands({
      nodeId: c.nodeId,
      supervisor: opts.supervisor,
      engines: opts.engines,
      inventory: () => this.inventory,
      report,
      logger: this.log,
    });
    this.recovery = new RecoverEngines({
      nodeId: c.nodeId,
      supervisor: opts.supervisor,
      adoptReadyTimeoutMs: c.adoptReadyTimeoutMs,
      settle: (shard, timeoutMs) => this.commands.settle(shard, timeoutMs),
      report,
      logger: this.log,
    });
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

  /** StartShard: see ShardCommands.start. */
  startShard(spec: StartShard): Promise<void> {
    return this.commands.start(spec);
  }

  /** StopShard: see ShardCommands.stop. */
  stopShard(m: Pick<StopShard, 'shardId' | 'grace'>): Promise<void> {
    return this.commands.stop(m);
  }

  /** `ctl drain`: see ShardCommands.drain. */
  drainShard(id: string): ShardSnapshot {
    return this.commands.drain(id);
  }

  private handleDrainCommand(id: string): void {
    this.commands.drainCommand(id);
  }

  /** Engines a previous agent left: see RecoverEngines.recover. */
  recoverOrphans(): Promise<AdoptResultView[]> {
    return this.recovery.recover();
  }

  /** `ctl adopt`: see RecoverEngines.adoptNow. */
  adoptNow(): Promise<AdoptResultView[]> {
    return this.recovery.adoptNow();
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
