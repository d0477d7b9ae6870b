import type { ControlMessage, Inventory, ShardStatus, StartShard, StopShard } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { RateLimitedLog } from '../lib/rate-limited-log.js';
import { isValidShardId } from '../lib/shard-id.js';
import type { AgentMetrics } from './agent-metrics.js';
import type { AgentConfig } from './config/agent-config.js';
import type { ConnectionStatus } from './connection-state.js';
import { ControlPlaneConnection } from './control-plane-connection.js';
import type { GpuMemorySampler } from './discovery/gpu-memory-sampler.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import { InventoryWatcher } from './inventory-watcher.js';
import type { Outbox } from './outbox.js';
import { type AdoptResultView, RecoverEngines } from './recover-engines.js';
import { buildHeartbeat, buildRegister, describeNode, type NodeDescription } from './register-message.js';
import { ShardCommands } from './shard-commands.js';
import { StatusReporter } from './status-reporter.js';
import type { ShardSnapshot, Supervisor } from './supervisor/supervisor.js';

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
  /**
   * Warnings about control messages themselves: one per message let 20k empty
   * messages and rejected acks write 23 MB of log in seconds, with no status
   * sent to slow the flood down (finding 6, control-plane-flood.test.ts).
   */
  private readonly wireWarnings: RateLimitedLog;
  private readonly node: NodeDescription;
  private readonly reporter: StatusReporter;
  private readonly inventoryWatcher: InventoryWatcher;
  private readonly connection: ControlPlaneConnection;
  private readonly commands: ShardCommands;
  private readonly recovery: RecoverEngines;

  constructor(private readonly opts: AgentOptions) {
    this.log = opts.logger;
    this.wireWarnings = new RateLimitedLog(this.log);
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
        onEstablished: () => this.reporter.onSessionEstablished(),
        onClosed: () => this.reporter.onSessionClosed(),
        onControlMessage: (m, outbox) => this.onControlMessage(m, outbox),
      },
    });
    opts.supervisor.on('transition', (t) => this.reporter.onTransition(t));
    const report = (status: ShardStatus) => this.reporter.report(status);
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

  private onControlMessage(m: ControlMessage, _outbox: Outbox): void {
    this.opts.metrics?.messagesReceived.inc({ type: m.msg.case ?? 'unknown' });
    switch (m.msg.case) {
      case 'start':
        // In the background: loading takes minutes, and the stream must keep
        // carrying heartbeats and other commands meanwhile.
        void this.commands.start(m.msg.value);
        return;
      case 'stop':
        void this.commands.stop(m.msg.value);
        return;
      case 'drain':
        this.commands.drainCommand(m.msg.value.shardId);
        return;
      case 'ack':
        if (!m.msg.value.ok) {
          this.wireWarnings.warn({ messageId: String(m.msg.value.messageId), err: m.msg.value.error }, 'control plane rejected a message');
        }
        return;
      default:
        this.wireWarnings.warn({ messageId: String(m.messageId) }, 'control message with no command; ignored');
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

  /** Engines a previous agent left: see RecoverEngines.recover. */
  recoverOrphans(): Promise<AdoptResultView[]> {
    return this.recovery.recover();
  }

  /** `ctl adopt`: see RecoverEngines.adoptNow. */
  adoptNow(): Promise<AdoptResultView[]> {
    return this.recovery.adoptNow();
  }
}
