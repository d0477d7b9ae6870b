import { join } from 'node:path';
import type { ControlMessage, GpuEvent, Inventory, ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import { usageError } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { RateLimitedLog } from '../lib/rate-limited-log.js';
import type { AgentMetrics } from './metrics/agent-metrics.js';
import type { AgentConfig } from './config/agent-config.js';
import type { ConnectionStatus } from './connection/connection-state.js';
import { ControlPlaneConnection } from './connection/control-plane-connection.js';
import { type AdminBackend, adminBackend, type GpuFaultClearing, type GpuHealthView } from './admin/admin-backend.js';
import { AgentEventRing } from './events/agent-event-ring.js';
import { adoptionEvents, connectionEvent, cordonEvent, diskPressureEvent, gpuEventEvent, refusalEvent } from './events/describe-agent-event.js';
import { GpuHealthWatch } from './health/gpu-health-watch.js';
import { watchedGpus } from './health/watched-gpu.js';
import type { GpuMemorySampler } from './health/gpu-memory-sampler.js';
import { agentSleepProbes, readShardGpuMib } from './supervisor/shard/agent-sleep-probes.js';
import type { NvmlLibrary } from './discovery/nvml/nvml-library.js';
import type { EngineAccount } from './engines/engine-account.js';
import type { EngineRegistry } from './engines/engine-registry.js';
import { HardwareStartGate } from './hardware-start-gate.js';
import { InventoryWatcher } from './inventory-watcher.js';
import { NodeModels } from './models/node-models.js';
import { WarmthLedger } from './models/warmth-ledger.js';
import { measureDiskWriteLater } from './models/disk-write-rate.js';
import { transferRates } from '../models/transfer-rates.js';
import { compileClaimsFor, engineUid } from './models/compile-claims-for.js';
import { NodeConditions } from './node-conditions.js';
import { type AdoptResultView, RecoverEngines } from './recover-engines.js';
import { buildHeartbeat, buildRegister, describeNode, type NodeDescription } from './connection/register-message.js';
import { wireInventory } from './connection/inventory-wire.js';
import { ShardCommands } from './shard-commands.js';
import { shardReactions } from './shard-reactions.js';
import { StartAdmission } from './start-admission.js';
import { type PortGuard, SleepPortGuards } from './supervisor/shard/sleep-port-guards.js';
import { NftPortGuard } from '../lib/net/nft-port-guard.js';
import { StatusReporter } from './connection/status-reporter.js';
import type { Supervisor } from './supervisor/supervisor.js';
import { AgentAdapters } from './agent-adapters.js';

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
  /** The NVML the agent keeps open (GPU source "nvml"): the health watch's events and poll. Without it only the kernel log is watched. */
  nvml?: NvmlLibrary;
  /** Register.gang_endpoint once the gang endpoint listens (run-agent.ts). */
  gangEndpoint?: () => string;
  /** What keeps a sleep-mode shard's port from other local users; nftables by default (sleep-port-guards.ts). */
  portGuard?: PortGuard;
}

/**
 * The node agent: hardware discovery, engine recovery, and one Connect
 * stream to the control plane for as long as it runs. It assembles the parts
 * that do each (ControlPlaneConnection, StatusReporter, InventoryWatcher, the
 * Supervisor) and gives the admin socket its view of them (`admin`).
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
  /** What the admin socket asks of this agent. */
  readonly admin: AdminBackend;
  /** The node's model store: PrefetchModel, pins, what Inventory says of it (issue 30). */
  readonly models: NodeModels;
  /** The agent's recent state changes, for `ctl events` and `ctl top`. */
  readonly events = new AgentEventRing();
  /** Times to READY this node measured, by model and where each start came from (issue 41). */
  readonly warmth: WarmthLedger;
  /** DiskPressure and Cordoned: in every Inventory, and what refuses a new start while one holds. */
  readonly conditions: NodeConditions;
  /** Each shard's LoRA adapters (issue 53): SetAdapters, ShardStatus.adapters, `ctl adapters`. */
  readonly adapters: AgentAdapters;
  /** Opens once the first Register is out: hardware reads wait for it. */
  private hardwareGate: HardwareStartGate | undefined;
  private health: GpuHealthWatch | undefined;
  private allClosed: Promise<unknown> | undefined;
  private readonly compileClaims: ReturnType<typeof compileClaimsFor>;
  /** Per GPU, the fault the last Inventory sent carried: a new Inventory goes out when it changes. */
  private readonly sentFaults = new Map<number, string | undefined>();

  constructor(private readonly opts: AgentOptions) {
    this.log = opts.logger;
    this.wireWarnings = new RateLimitedLog(this.log);
    const c = opts.config;
    this.node = describeNode(c, opts.version, opts.gangEndpoint);
    this.conditions = new NodeConditions(c.supervisor, this.log);
    this.reporter = new StatusReporter({ nodeId: c.nodeId, metrics: opts.metrics, logger: this.log, decorate: (s) => this.adapters?.decorate(s) ?? s });
    this.inventoryWatcher = new InventoryWatcher({
      discover: opts.discover,
      stateDir: c.supervisor.stateDir,
      intervalMs: c.discovery.intervalMs,
      logger: this.log,
      onScan: (inventory) => this.health?.judgeScan(watchedGpus(inventory)),
      onChange: () => {
        // GPUs come and go (a card falls off the bus, a reset brings it back): the health watch follows.
        this.health?.setGpus(watchedGpus(this.inventoryWatcher.current()));
        this.sendInventory();
      },
    });
    this.connection = new ControlPlaneConnection({
      config: c,
      logger: this.log,
      metrics: opts.metrics,
      onPhase: (from, status) => this.events.record(connectionEvent(from, status)),
      session: {
        register: () => this.adapters.withRunningAdapters(buildRegister(this.node, wireInventory(this.reportedInventory), opts.supervisor.list(), this.conditions.cordoned())),
        heartbeat: () => this.heartbeat(),
        onOpen: (outbox) => this.reporter.onSessionOpen(outbox),
        onEstablished: () => {
          this.reporter.onSessionEstablished();
          this.hardwareGate?.established();
        },
        onClosed: () => this.reporter.onSessionClosed(),
        onControlMessage: (m) => this.onControlMessage(m),
      },
    });
    this.reporter.follow(opts.supervisor);
    this.models = new NodeModels({
      models: c.models,
      configPath: 'the agent config',
      send: (pull) => this.reporter.modelPull(pull),
      onChange: () => this.sendInventory(),
      refreshIntervalMs: c.discovery.intervalMs,
      logger: this.log,
      onRate: (kind, bytes, ms) => this.warmth.learnRate(kind, bytes, ms),
    });
    const claims = compileClaimsFor(this.models, join(c.supervisor.stateDir, 'compile-claims.json'), (engine) => engineUid(this.engineAccounts(), engine), this.log, () => this.sendInventory());
    this.compileClaims = claims;
    this.warmth = new WarmthLedger({ path: join(c.supervisor.stateDir, 'warmth.json'), hasStore: c.models.cacheDir !== '', logger: this.log, onLearned: () => this.sendInventory(), cached: () => this.models.current().cachedModels, compiled: claims && ((model, engine, profile) => claims.claimed(model, engine, profile)), gpuMemoryMib: readShardGpuMib(opts.sampler) });
    const sleepPorts = new SleepPortGuards({ engines: c.engines, agentUid: process.getuid?.() ?? 0, guard: opts.portGuard ?? new NftPortGuard(), shards: () => opts.supervisor.list(), log: this.log });
    const reactions = shardReactions({ events: this.events, models: this.models, warmth: this.warmth, compileClaims: claims, health: () => this.health, logDir: c.supervisor.logDir, log: this.log, engineEnded: (pgrp) => this.inventoryWatcher.processes.engineEnded(pgrp), sleepPortEnded: sleepPorts.follow });
    for (const r of reactions) opts.supervisor.react(r);
    // A condition that starts or stops holding is news to placement now, not at the next rescan.
    this.conditions.on('change', () => this.sendInventory());
    // The node's own changes are events too, beside the shards' and GPUs' (walkthrough 3, item 7).
    this.conditions.cordon.on('change', (state, uid) => this.events.record(cordonEvent(state, uid)));
    this.conditions.disk.on('change', (state) => this.events.record(diskPressureEvent(state.active, state.reason)));
    const report = (status: ShardStatus) => this.reporter.report(status);
    this.adapters = new AgentAdapters({ nodeId: c.nodeId, stateDir: c.supervisor.stateDir, supervisor: opts.supervisor, models: this.models, report, log: this.log });
    const admission = new StartAdmission({
      supervisor: opts.supervisor,
      engines: opts.engines,
      inventory: () => this.inventory,
      gpuFault: (gpuIndex) => this.health?.describeFault(gpuIndex),
      foreignMemoryShare: c.discovery.foreignMemoryShare,
      nodeRefusal: () => this.conditions.refusal(),
      models: this.models,
      processGone: (pid) => this.inventoryWatcher.processes.gone(pid),
      beforeLaunch: (spec, plan) => sleepPorts.beforeLaunch(spec, plan),
      adapters: this.adapters,
      logger: this.log,
    });
    this.commands = new ShardCommands({
      nodeId: c.nodeId,
      supervisor: opts.supervisor,
      admission,
      report,
      logger: this.log,
      models: this.models,
      onRefused: (what, shard, why) => this.events.record(refusalEvent(what, shard, why)),
      onWakeAsked: (shard) => this.warmth.wakeAsked(shard),
      sleepProbes: agentSleepProbes({ config: c, sampler: opts.sampler, warmth: this.warmth, models: this.models, inventory: () => this.inventory, shards: () => opts.supervisor.list(), nvml: opts.nvml }),
    });
    this.recovery = new RecoverEngines({
      nodeId: c.nodeId,
      supervisor: opts.supervisor,
      adoptReadyTimeoutMs: c.adoptReadyTimeoutMs,
      settle: (shard, timeoutMs) => this.commands.settle(shard, timeoutMs),
      report,
      logger: this.log,
    });
    this.admin = adminBackend({
      node: { nodeId: c.nodeId, version: opts.version, startedAtMs: this.startedAtMs, foreignMemoryShare: c.discovery.foreignMemoryShare },
      view: this,
      supervisor: opts.supervisor,
      commands: this.commands,
      recovery: { adoptNow: () => this.recovery.adoptNow().then((results) => this.recordAdoptions(results)) },
      events: this.events, logger: this.log,
      cordon: this.conditions.cordon,
      models: this.models,
      adapters: this.adapters.admin(),
    });
  }

  get nodeId(): string { return this.opts.config.nodeId; }
  connectionStatus(): ConnectionStatus { return this.connection.status(); }
  currentInventory(): Inventory { return this.reportedInventory; }

  private sendInventory(): void { this.reporter.send({ case: 'inventory', value: wireInventory(this.reportedInventory) }); }

  /** The inventory as it goes out (Register, Inventory, ctl, metrics): with the warmth, which admission's reads need not build. */
  private get reportedInventory(): Inventory {
    return Object.assign(this.inventory, { warmth: this.warmth.report(this.opts.supervisor.list(), this.models.current().cachedModels), rates: transferRates(this.warmth.rates()) });
  }

  /** The account each registered engine runs as under this agent, and whether that refuses its starts. */
  engineAccounts(): EngineAccount[] { return this.opts.engines.accounts(process.getuid?.() ?? -1); }

  /** Each GPU of the inventory: its latest memory reading, unresolved fault and last events (none before the watch starts). */
  gpuHealth(): GpuHealthView[] {
    const watch = this.health;
    const used = buildHeartbeat(this.nodeId, this.opts.sampler.latest(), this.inventoryWatcher.current()).gpuMemoryUsedMb;
    return this.inventory.gpus.map((g) => ({
      index: g.index,
      memoryUsedMb: used[g.index] ?? g.memoryUsedMb,
      healthy: g.healthy,
      error: g.error,
      fault: watch?.faultOf(g.index),
      recentEvents: watch?.recentEvents(g.index) ?? [],
    }));
  }

  /**
   * `ctl gpu clear`: forgets the GPU's faults, recorded in the log with the
   * caller's uid (the audit trail) and sent to the control plane as a
   * CLEARED_BY_OPERATOR GpuEvent; the shards on it go back to their own health.
   */
  clearGpuFault(gpuIndex: number, reason: string, uid: number | undefined): GpuFaultClearing {
    // A GPU gone from the inventory (fallen off the bus) may still hold faults: those can be cleared.
    if (!this.inventory.gpus.some((g) => g.index === gpuIndex) && !this.health?.faultOf(gpuIndex)) {
      throw usageError(`no GPU ${gpuIndex} on this node (GPUs: ${this.inventory.gpus.map((g) => g.index).join(', ') || 'none'}); see \`llmgw ctl status\``);
    }
    const by = `uid ${uid ?? 'unknown'}${reason === '' ? '' : `: ${reason}`}`;
    const before = this.health?.recentEvents(gpuIndex).length ?? 0;
    const cleared = this.health?.clearByOperator(gpuIndex, by) ?? [];
    this.log.warn({ gpu: gpuIndex, uid: uid ?? null, reason, cleared }, cleared.length > 0 ? 'GPU faults cleared by an operator' : 'GPU clear asked by an operator: no fault was held');
    const events = this.health?.recentEvents(gpuIndex) ?? [];
    return { cleared, event: cleared.length > 0 && events.length >= before ? events.at(-1) : undefined };
  }

  /**
   * Runs until `signal` aborts: recovers engines a previous agent left, reads
   * the hardware, then holds a session to the control plane for ever,
   * reconnecting with backoff. Resolves once the stream is closed; engines
   * are left running.
   */
  async run(signal: AbortSignal, hooks: { onFirstAttempt?: () => void } = {}): Promise<void> {
    // Recovery first, not after hardware discovery: adopted engines settle in the background, not after nvidia-smi.
    this.recordAdoptions(await this.recovery.recover());
    // Pins become those of the shards the agent has: a crash's leftovers go, adopted shards keep theirs.
    await this.models.reconcile(this.opts.supervisor.list().map((s) => s.spec));
    // The store's disk rate, a minute on (Inventory.rates): what a pull's rate is a fraction of.
    measureDiskWriteLater({ cacheDir: this.opts.config.models.cacheDir, signal, logger: this.log, onRate: (bytes, ms) => this.warmth.learnRate('diskWrite', bytes, ms) });
    const stopWatching = () => {
      this.conditions.close();
      this.models.close();
      this.opts.sampler.close();
      // At once, not after the stream: a pending NVML event wait is what SIGTERM waits for. And no state file (inventory cache, ledgers, claims, answers) is written after.
      this.allClosed ??= Promise.all([this.health?.close(), this.inventoryWatcher.stop(), this.adapters.close(), this.warmth.close(), this.compileClaims?.close()]);
    };
    try {
      this.hardwareGate = new HardwareStartGate(signal);
      const registered = this.hardwareGate.opened;
      await this.inventoryWatcher.start(signal, { rescanAfter: registered });
      await this.conditions.start();
      void registered.then(() => this.opts.sampler.start());
      if (!signal.aborted) await this.startGpuHealth();
      await this.connection.run(signal, { onFirstAttempt: hooks.onFirstAttempt, onStopping: stopWatching });
    } finally {
      // Also when the connection could not start (a bad certificate): a timer left behind keeps the process alive.
      stopWatching();
      // The caller closes NVML next: no event wait may still be running on its worker thread then; nor may a write be cut off by the exit.
      await this.allClosed;
    }
  }

  /**
   * Watches the GPUs of the inventory for faults (NVML events and poll, the
   * kernel log). Started before the first session so that a fault found at
   * start (a GPU lost while the agent was down) is in the first Register.
   */
  private async startGpuHealth(): Promise<void> {
    const c = this.opts.config;
    const watch = new GpuHealthWatch({
      nvml: this.opts.nvml,
      gpus: watchedGpus(this.inventoryWatcher.current()),
      kmsgPath: c.discovery.kmsg,
      pollIntervalMs: c.discovery.intervalMs,
      shardsOn: (i) => this.opts.supervisor.shardsOnGpu(i).map((s) => s.shardId),
      logger: this.log,
    });
    watch.on('event', (e) => this.onGpuEvent(e));
    this.health = watch;
    await watch.start();
  }

  /**
   * A GPU fault (or its clearing): the event goes out first, so the control
   * plane reads the cause before the UNHEALTHY statuses it explains; then
   * every shard on that GPU is marked (engines are left running: the control
   * plane decides); then an Inventory with the GPU's new health, which
   * placement reads.
   */
  private onGpuEvent(e: GpuEvent): void {
    this.events.record(gpuEventEvent(e));
    // Kept through a disconnect and sent after the next Register (status-reporter.ts).
    this.reporter.gpuEvent(e);
    this.opts.metrics?.countGpuEvent(e);
    const watch = this.health as GpuHealthWatch;
    this.opts.supervisor.gpuHealthChanged(e.gpuIndex, (i) => watch.describeFault(i));
    const fault = watch.describeFault(e.gpuIndex);
    if (this.sentFaults.get(e.gpuIndex) === fault) return;
    this.sentFaults.set(e.gpuIndex, fault);
    this.sendInventory();
  }

  /** Each outcome of an orphan scan (at start, or `ctl adopt`) as an event. */
  private recordAdoptions<T extends AdoptResultView[]>(results: T): T {
    for (const e of adoptionEvents(results)) this.events.record(e);
    return results;
  }

  /**
   * The inventory as last scanned, with each GPU's health from the watch
   * (validation, Register and Inventory all judge by it). A copy: the
   * watcher compares its own scans, which a fault must not make "changed".
   */
  private get inventory(): Inventory {
    const scanned = this.inventoryWatcher.current();
    // The scan is never written (conditions and warnings are replaced, the watch writes each GPU's health), so the
    // GPUs are copied one level: a deep clone, twice per admission, was a third of the CPU under refused starts.
    const marked = { ...scanned, gpus: this.health ? scanned.gpus.map((g) => ({ ...g })) : scanned.gpus };
    this.health?.markInventory(marked.gpus);
    marked.conditions = this.conditions.list();
    const held = this.conditions.warnings();
    if (held.length > 0) marked.warnings = [...scanned.warnings, ...held];
    const cache = this.models.current();
    marked.cachedModels = cache.cachedModels;
    marked.modelCacheFreeBytes = cache.freeBytes;
    return marked;
  }

  private heartbeat() {
    // Not the fault-marked clone, a fifth of an idle agent's JS time (bench 5b); GPU memory metrics are read when scraped (gpuHealth).
    return buildHeartbeat(this.nodeId, this.opts.sampler.latest(), this.inventoryWatcher.current());
  }

  private onControlMessage(m: ControlMessage): void {
    this.opts.metrics?.messagesReceived.inc({ type: m.msg.case ?? 'unknown' });
    switch (m.msg.case) {
      case 'start':
        // In the background: loading takes minutes, and the stream carries heartbeats and commands meanwhile.
        void this.commands.start(m.msg.value);
        return;
      case 'stop':
        void this.commands.stop(m.msg.value);
        return;
      case 'drain':
        void this.commands.drainCommand(m.msg.value.shardId);
        return;
      case 'prefetch':
        // In the background, like a start: a pull takes minutes; its progress goes out as ModelPull.
        void this.models.prefetch(m.msg.value);
        return;
      case 'sleep':
        // In the background: the engine's sleep and the memory's fall take seconds.
        void this.commands.sleepCommand(m.msg.value);
        return;
      case 'wake':
        void this.commands.wakeCommand(m.msg.value);
        return;
      case 'setAdapters': // In the background, like a start: pulls, loads and proofs take seconds.
        void this.adapters.set(m.msg.value);
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
}
