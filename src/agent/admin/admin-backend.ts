import type { AdapterSpec, AdapterStatus, GpuEvent, Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import type { ShardId } from '../../lib/shard-id.js';
import type { ConnectionStatus } from '../connection/connection-state.js';
import type { EngineAccount } from '../engines/engine-account.js';
import type { AgentEventRing, AgentEventView, EventListener } from '../events/agent-event-ring.js';
import type { GpuFault } from '../health/gpu-fault-ledger.js';
import type { NodeCordon } from '../node-cordon.js';
import type { NodeModels, WaitingStart } from '../models/node-models.js';
import type { ShardCommands, SleepOutcome } from '../shard-commands.js';
import type { AdoptResultView, RecoverEngines } from '../recover-engines.js';
import type { Logger } from '../../lib/logger.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import type { Supervisor } from '../supervisor/supervisor.js';

/** A shard's adapters as `ctl adapters` reads and changes them (NodeAdapters). */
export interface AdminAdapters {
  statuses(id: ShardId): AdapterStatus[];
  desired(id: ShardId): AdapterSpec[];
  limits(id: ShardId): { maxLoaded: number; maxRank: number };
  set(id: ShardId, adapters: readonly AdapterSpec[]): Promise<{ ok: true } | { refused: string }>;
}

/** What `ctl gpu clear` did: the faults' messages, and the event sent (none when nothing was held). */
export interface GpuFaultClearing {
  cleared: string[];
  event?: GpuEvent;
}

/** A change asked over the admin socket, with the caller's uid as the kernel gave it (SO_PEERCRED). */
export interface OperatorAct {
  act: 'sleep' | 'wake' | 'drain' | 'drain --cancel' | 'adopt' | 'gpu clear' | 'adapters --load' | 'adapters --unload';
  uid: number | undefined;
  shardId?: string;
  gpu?: number;
  /** What else the request said: the level of a sleep, `all` for a drain of every shard. */
  detail?: string;
}

/** One GPU's health as `ctl status` shows it. */
export interface GpuHealthView {
  index: number;
  /** The latest reading (the heartbeats'), MiB. */
  memoryUsedMb: number;
  /** Discovery's verdict and the watch's together, as the next Inventory says. */
  healthy: boolean;
  /** Why not: the watch's fault first, then what discovery said. */
  error: string;
  fault?: GpuFault;
  recentEvents: GpuEvent[];
}

/**
 * What the admin socket may ask of the agent: reads, plus the three acts an
 * operator can take (follow a log, adopt, drain). Nothing here stops an
 * engine; that stays the control plane's decision. Every shard id was
 * parsed by the admin routes (the socket's edge) before it gets here.
 */
export interface AdminBackend {
  readonly nodeId: string;
  readonly version: string;
  readonly startedAtMs: number;
  /** discovery.foreign_memory_share: ctl status judges a GPU's foreign memory by the share StartShard refuses at. */
  readonly foreignMemoryShare: number;
  connectionStatus(): ConnectionStatus;
  currentInventory(): Inventory;
  /** Each GPU of the inventory: its latest memory reading, unresolved fault and last events. */
  gpuHealth(): GpuHealthView[];
  /** The account each registered engine runs as, and whether that refuses its starts. */
  engineAccounts(): EngineAccount[];
  shards(): ShardSnapshot[];
  shard(id: ShardId): ShardSnapshot | undefined;
  /** supervisor.log_dir: `ctl logs` of a shard no longer supervised reads its kept log from here; absent, it cannot. */
  readonly logDir?: string;
  /** supervisor.state_dir: state files name the replica of each run (`ctl logs --previous --replica`). */
  readonly stateDir?: string;
  /** The last lines of a shard's log, streamed a chunk's lines at a time; `signal` stops the read. */
  logLines(id: ShardId, lines: number, signal: AbortSignal): AsyncIterable<string[]>;
  /** `ctl logs --previous`: the run before the current one, as logLines; undefined when none is kept. */
  previousLogLines(id: ShardId, lines: number, signal: AbortSignal): AsyncIterable<string[]> | undefined;
  /** The last `backlogLines` lines, then new ones; ends when the shard is removed, on `signal`, or when the agent stops. */
  followLog(id: ShardId, signal: AbortSignal, backlogLines: number): AsyncIterable<string[]>;
  /** Requests a shard's engine is working on; undefined when it cannot tell. */
  inFlight(id: ShardId): Promise<number | undefined>;
  /** `ctl adopt`: engines a previous agent left, judged again now. */
  adoptNow(): Promise<AdoptResultView[]>;
  /** `ctl drain`: READY → DRAINING, reported to the control plane by the transition. */
  drainShard(id: ShardId): Promise<ShardSnapshot>;
  /** `ctl gpu clear`: forgets a GPU's faults, audited with the caller's uid; a usage error for a GPU the node does not have. */
  clearGpuFault?(gpuIndex: number, reason: string, uid: number | undefined): GpuFaultClearing;
  /** `ctl drain --cancel`: DRAINING → READY. */
  cancelDrainShard(id: ShardId): Promise<ShardSnapshot>;
  /** `ctl sleep` / `ctl wake`: as the control plane's SleepShard and WakeShard (the same refusals, reported the same way); absent where there are none. */
  sleepShard?(id: ShardId, level: number): Promise<SleepOutcome>;
  /** `ctl adapters`: a shard's LoRA adapters, and a change of its desired set as a SetAdapters makes it (issue 53); absent where there are none. */
  adapters?: AdminAdapters;
  wakeShard?(id: ShardId): Promise<SleepOutcome>;
  /** `ctl events`: the kept events after seq `afterSeq` and at or after `sinceMs`, oldest first. */
  events(afterSeq: number, sinceMs: number): AgentEventView[];
  /** `ctl events -f`: told of each new event synchronously as it is recorded; the returned function stops it. */
  followEvents(listener: EventListener): () => void;
  /** `ctl cordon` / `uncordon`: the node's cordon, kept in the state directory; absent on a backend that has none. */
  readonly cordon?: Pick<NodeCordon, 'set' | 'current'>;
  /** Starts not yet in the registry: they wait for their model's pull into the node's store. */
  waitingStarts?(): WaitingStart[];
  /** Records who asked a change (an event for `ctl events`, a log line), before it is made or refused: security review 4, F8. */
  audit?(act: OperatorAct): void;
}

/** The agent's parts the admin socket reads and acts through. */
export interface AdminBackendParts {
  node: Pick<AdminBackend, 'nodeId' | 'version' | 'startedAtMs' | 'foreignMemoryShare'>;
  /** What the agent itself assembles: the stream's state, the inventory with the health watch's faults, accounts. */
  view: Pick<AdminBackend, 'connectionStatus' | 'currentInventory' | 'gpuHealth' | 'engineAccounts' | 'clearGpuFault'>;
  supervisor: Supervisor;
  commands: Pick<ShardCommands, 'drain' | 'cancelDrain'> & Partial<Pick<ShardCommands, 'sleepCommand' | 'wakeCommand'>>;
  recovery: Pick<RecoverEngines, 'adoptNow'>;
  events: Pick<AgentEventRing, 'list' | 'subscribe'> & Partial<Pick<AgentEventRing, 'record'>>;
  /** Where the audit lines of operators' changes go. */
  logger?: Logger;
  cordon?: Pick<NodeCordon, 'set' | 'current'>;
  models?: Pick<NodeModels, 'waitingStarts'>;
  adapters?: AdminAdapters;
}

/** The admin socket's view of an agent, from the parts that answer each call. */
export function adminBackend({ node, view, supervisor: sup, commands, recovery, events, logger, cordon, models, adapters }: AdminBackendParts): AdminBackend {
  return {
    nodeId: node.nodeId,
    version: node.version,
    startedAtMs: node.startedAtMs,
    foreignMemoryShare: node.foreignMemoryShare,
    connectionStatus: () => view.connectionStatus(),
    currentInventory: () => view.currentInventory(),
    gpuHealth: () => view.gpuHealth(),
    engineAccounts: () => view.engineAccounts(),
    clearGpuFault: view.clearGpuFault && ((gpuIndex, reason, uid) => view.clearGpuFault?.(gpuIndex, reason, uid) ?? { cleared: [] }),
    shards: () => sup.list(),
    shard: (id) => sup.get(id),
    logDir: sup.logDir,
    stateDir: sup.stateDir,
    logLines: (id, lines, signal) => sup.logLines(id, lines, signal),
    previousLogLines: (id, lines, signal) => sup.previousLogLines(id, lines, signal),
    followLog: (id, signal, backlogLines) => sup.followLog(id, signal, backlogLines),
    inFlight: (id) => sup.inFlight(id),
    adoptNow: () => recovery.adoptNow(),
    drainShard: (id) => commands.drain(id),
    cancelDrainShard: (id) => commands.cancelDrain(id),
    ...(commands.sleepCommand && commands.wakeCommand
      ? {
          sleepShard: (id: ShardId, level: number) => commands.sleepCommand?.({ shardId: id, level }) as Promise<SleepOutcome>,
          wakeShard: (id: ShardId) => commands.wakeCommand?.({ shardId: id }) as Promise<SleepOutcome>,
        }
      : {}),
    events: (afterSeq, sinceMs) => events.list(afterSeq, sinceMs),
    followEvents: (listener) => events.subscribe(listener),
    cordon,
    adapters,
    waitingStarts: models && (() => models.waitingStarts()),
    audit: (a) => {
      const target = a.shardId ?? (a.gpu !== undefined ? `GPU ${a.gpu}` : undefined);
      const message = `ctl ${a.act}${target ? ` ${target}` : ''}${a.detail ? ` (${a.detail})` : ''} asked by uid ${a.uid ?? 'unknown'}`;
      events.record?.({
        kind: a.shardId !== undefined ? 'shard' : a.gpu !== undefined ? 'gpu' : 'node',
        shardId: a.shardId,
        gpu: a.gpu,
        message,
        fields: { uid: String(a.uid ?? 'unknown'), act: a.act, ...(a.detail ? { detail: a.detail } : {}) },
      });
      logger?.info({ uid: a.uid ?? null, act: a.act, shard: a.shardId, gpu: a.gpu, detail: a.detail }, 'an operator asked a change over the admin socket');
    },
  };
}
