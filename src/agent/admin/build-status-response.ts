import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import {
  ConnectionState,
  ControlPlaneConnectionSchema,
  ControlPlaneTlsSchema,
  EngineAccountSchema,
  type GpuStatus,
  GpuStatusSchema,
  type ShardInfo,
  ShardInfoSchema,
  type StatusResponse,
  StatusResponseSchema,
} from '../../gen/llmgw/v1/admin_pb.js';
import { type Inventory, ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../../lib/foreign-memory-problem.js';
import type { GpuHealthView } from './admin-backend.js';
import type { ConnectionPhase, ConnectionStatus } from '../connection/connection-state.js';
import type { LoadedTls } from '../connection/control-plane-transport.js';
import type { WaitingStart } from '../models/node-models.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import type { AdminBackend } from './admin-backend.js';

const CONNECTION_STATES: Record<ConnectionPhase, ConnectionState> = {
  starting: ConnectionState.STARTING,
  connecting: ConnectionState.CONNECTING,
  connected: ConnectionState.CONNECTED,
  retrying: ConnectionState.RETRYING,
  stopping: ConnectionState.STOPPED,
  stopped: ConnectionState.STOPPED,
};

export interface StatusOptions {
  /**
   * discovery.foreign_memory_share, the share StartShard validation refuses a GPU at
   * (the admin routes pass the agent's); DEFAULT_FOREIGN_MEMORY_SHARE when not given.
   */
  foreignMemoryShare?: number;
}

/** What `ctl status` shows: the agent, its control-plane connection, its hardware and its GPUs' health, and its shards. */
export function buildStatusResponse(backend: AdminBackend, opts: StatusOptions = {}): StatusResponse {
  const inventory = backend.currentInventory();
  return create(StatusResponseSchema, {
    nodeId: backend.nodeId,
    version: backend.version,
    connection: connectionOf(backend.connectionStatus()),
    inventory,
    gpus: backend.gpuHealth().map((g) => gpuStatusOf(g, inventory, opts.foreignMemoryShare ?? DEFAULT_FOREIGN_MEMORY_SHARE)),
    engineAccounts: backend.engineAccounts().map((a) => create(EngineAccountSchema, a)),
    shards: [...backend.shards().map(shardInfoOf), ...(backend.waitingStarts?.() ?? []).map(waitingShardInfoOf)].sort((a, b) => a.shardId.localeCompare(b.shardId)),
    startedAt: timestampFromMs(backend.startedAtMs),
    pid: process.pid,
  });
}

function connectionOf(c: ConnectionStatus) {
  return create(ControlPlaneConnectionSchema, {
    server: c.server,
    protocol: c.protocol,
    state: CONNECTION_STATES[c.phase],
    connectedSince: c.connectedSinceMs > 0 ? timestampFromMs(c.connectedSinceMs) : undefined,
    attempt: c.attempt,
    nextAttemptAt: c.nextAttemptAtMs > 0 ? timestampFromMs(c.nextAttemptAtMs) : undefined,
    lastError: c.lastError,
    tls: c.tls ? tlsOf(c.tls) : undefined,
  });
}

function tlsOf(t: LoadedTls) {
  return create(ControlPlaneTlsSchema, {
    certPath: t.certPath,
    ca: t.ca,
    ...(t.cert && {
      certSubject: t.cert.subject,
      certNotBefore: timestampFromMs(t.cert.notBeforeMs),
      certNotAfter: timestampFromMs(t.cert.notAfterMs),
      certFingerprintSha256: t.cert.fingerprint256,
      certExpiresSoon: t.cert.notAfterMs - Date.now() <= t.expiryWarningMs,
    }),
  });
}

/**
 * One GPU's row. A healthy GPU whose memory is used by nothing this node can
 * see is refused for starts (StartShard validation), failed by discover's
 * foreign-memory check and left out by the control plane, all through
 * foreignMemoryProblem: its fault says so here too, `foreign memory 88%: …`,
 * while `healthy` stays the hardware's verdict. ctl status said `ok` for such
 * a GPU (new-operator walkthrough 2, row 4).
 */
function gpuStatusOf(g: GpuHealthView, inventory: Inventory, share: number): GpuStatus {
  return create(GpuStatusSchema, {
    index: g.index,
    memoryUsedMb: g.memoryUsedMb,
    healthy: g.healthy,
    fault: g.healthy ? foreignMemoryFault(g.index, inventory, share) : g.error,
    recentEvents: g.recentEvents,
  });
}

/** "foreign memory 88%: <foreignMemoryProblem's sentence>", or "" when the GPU's memory is accounted for. */
function foreignMemoryFault(index: number, inventory: Inventory, share: number): string {
  const gpu = inventory.gpus.find((x) => x.index === index);
  if (!gpu) return '';
  // The inventory's reading, as StartShard validation judges it (not the fresher heartbeat's).
  const problem = foreignMemoryProblem(gpu, inventory.processes, share);
  if (!problem) return '';
  const visible = inventory.processes.filter((p) => p.gpuUuid === gpu.uuid).reduce((sum, p) => sum + Math.max(0, p.usedMemoryMb), 0);
  const pct = Math.round((100 * (gpu.memoryUsedMb - visible)) / gpu.memoryTotalMb);
  return `foreign memory ${pct}% (no shard starts on it): ${problem}`;
}

/**
 * A start waiting for its model's pull: STARTING as the control plane sees
 * it (it sent StartShard), with no engine yet; the note says what it waits for.
 */
function waitingShardInfoOf(w: WaitingStart): ShardInfo {
  return create(ShardInfoSchema, {
    ...specColumns(w.spec),
    shardId: w.spec.shardId,
    replicaId: w.spec.replicaId,
    state: ShardState.STARTING,
    startedAt: timestampFromMs(w.sinceMs),
    note: `waiting for the pull of ${w.model} into the node's model store (llmgw models list shows it partial); the engine starts once it is complete`,
    // No engine to read yet.
    inFlight: -1,
    tokensPerSecond: -1,
  });
}

/** What a shard's ShardInfo says of the StartShard it was given. */
function specColumns(spec: WaitingStart['spec']) {
  return { engine: spec.profile?.engine ?? '', model: spec.profile?.model ?? '', httpPort: spec.httpPort, gpuIndices: spec.gpuIndices, rank: spec.rank, nnodes: spec.nnodes, gang: describeGang(spec) };
}

/** ShardInfo.gang: "rank 1 of 2 of gang chat-g3: rank 0 on node-a, rank 1 on node-b"; '' for one node. */
function describeGang(spec: WaitingStart['spec']): string {
  if (spec.nnodes <= 1) return '';
  const g = spec.gang;
  if (!g) return `rank ${spec.rank} of ${spec.nnodes}; the control plane sent no gang: rank 0 watched at its rendezvous ${spec.leaderAddr}:${spec.leaderPort} alone`;
  return `rank ${spec.rank} of ${spec.nnodes} of gang ${g.gangId}: ${g.members.map((m) => `rank ${m.rank} on ${m.nodeId}`).join(', ')}`;
}

export function shardInfoOf(s: ShardSnapshot): ShardInfo {
  return create(ShardInfoSchema, {
    ...specColumns(s.spec),
    shardId: s.shardId,
    replicaId: s.replicaId,
    state: s.state,
    pid: s.pid,
    startedAt: timestampFromMs(s.startedAtMs),
    adopted: s.adopted,
    error: s.error,
    exitCode: s.exitCode ?? 0,
    logPath: s.logPath,
    launcher: s.launcher ?? '',
    unit: s.unit ?? '',
    note: s.note ?? '',
    engineVersion: s.engineVersion ?? '',
    modelDigest: s.modelDigest ?? '',
    // The health watch's latest reading, never an engine call: Status is asked every second by each `ctl top`.
    inFlight: s.load?.inFlight === undefined ? -1 : Math.round(s.load.inFlight),
    tokensPerSecond: s.load?.tokensPerSecond ?? -1,
  });
}
