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
import type { GpuHealthView } from '../agent.js';
import type { ConnectionPhase, ConnectionStatus } from '../connection-state.js';
import type { LoadedTls } from '../control-plane-transport.js';
import type { ShardSnapshot } from '../supervisor/shard-snapshot.js';
import type { AdminBackend } from './admin-backend.js';

const CONNECTION_STATES: Record<ConnectionPhase, ConnectionState> = {
  starting: ConnectionState.STARTING,
  connecting: ConnectionState.CONNECTING,
  connected: ConnectionState.CONNECTED,
  retrying: ConnectionState.RETRYING,
  stopping: ConnectionState.STOPPED,
  stopped: ConnectionState.STOPPED,
};

/** What `ctl status` shows: the agent, its control-plane connection, its hardware and its GPUs' health, and its shards. */
export function buildStatusResponse(backend: AdminBackend): StatusResponse {
  return create(StatusResponseSchema, {
    nodeId: backend.nodeId,
    version: backend.version,
    connection: connectionOf(backend.connectionStatus()),
    inventory: backend.currentInventory(),
    gpus: backend.gpuHealth().map(gpuStatusOf),
    engineAccounts: backend.engineAccounts().map((a) => create(EngineAccountSchema, a)),
    shards: backend
      .shards()
      .sort((a, b) => a.shardId.localeCompare(b.shardId))
      .map(shardInfoOf),
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

function gpuStatusOf(g: GpuHealthView): GpuStatus {
  return create(GpuStatusSchema, {
    index: g.index,
    memoryUsedMb: g.memoryUsedMb,
    healthy: g.healthy,
    fault: g.healthy ? '' : g.error,
    recentEvents: g.recentEvents,
  });
}

export function shardInfoOf(s: ShardSnapshot): ShardInfo {
  const spec = s.spec;
  return create(ShardInfoSchema, {
    shardId: s.shardId,
    replicaId: s.replicaId,
    engine: spec.profile?.engine ?? '',
    model: spec.profile?.model ?? '',
    state: s.state,
    pid: s.pid,
    httpPort: spec.httpPort,
    gpuIndices: spec.gpuIndices,
    startedAt: timestampFromMs(s.startedAtMs),
    adopted: s.adopted,
    error: s.error,
    exitCode: s.exitCode ?? 0,
    rank: spec.rank,
    nnodes: spec.nnodes,
    logPath: s.logPath,
    launcher: s.launcher ?? '',
    unit: s.unit ?? '',
  });
}
