import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import {
  type SleepRequest,
  type SleepResponse,
  SleepResponseSchema,
  type WakeRequest,
  type WakeResponse,
  WakeResponseSchema,
} from '../../gen/llmgw/v1/admin_pb.js';
import { isValidShardId, SHARD_ID_PATTERN, type ShardId } from '../../lib/shard-id.js';
import type { AdminBackend } from './admin-backend.js';
import { shardInfoOf } from './build-status-response.js';
import { auditAct } from './operator-audit.js';
import { unknownShardError } from './unknown-shard-error.js';

/** The shard id a sleep or wake names, checked at the socket's edge; a shard this node does not run is NotFound. */
function shardOf(backend: AdminBackend, id: string): ShardId {
  if (!isValidShardId(id)) throw new ConnectError(`invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  if (!backend.shard(id)) throw unknownShardError(id, backend.nodeId, backend.shards());
  return id;
}

/**
 * `ctl sleep` (issue 39): a READY shard's engine frees its GPU memory, as a
 * SleepShard from the control plane makes it, with the same checks (a
 * profile with sleep_mode, the engine's sleep API, the GPU readings). The
 * control plane hears SLEEPING from the transition. A refusal is the
 * one-line reason, and the shard keeps its state.
 */
export async function sleepRoute(backend: AdminBackend, req: SleepRequest, ctx: HandlerContext): Promise<SleepResponse> {
  if (!backend.sleepShard) throw new ConnectError('this agent cannot put shards to sleep', Code.Unimplemented);
  const level = req.level === 0 ? 1 : req.level;
  if (level !== 1 && level !== 2) throw new ConnectError(`sleep level ${req.level} is not 1 (weights to host RAM) or 2 (weights dropped)`, Code.InvalidArgument);
  const id = shardOf(backend, req.shardId);
  auditAct(backend, ctx, { act: 'sleep', shardId: id, detail: `level ${level}` });
  const out = await backend.sleepShard(id, level);
  if ('refused' in out) throw new ConnectError(out.refused, Code.FailedPrecondition);
  return create(SleepResponseSchema, { shard: shardInfoOf(out.shard) });
}

/** `ctl wake`: SLEEPING → READY once the engine has its memory back and gives its known answer again. */
export async function wakeRoute(backend: AdminBackend, req: WakeRequest, ctx: HandlerContext): Promise<WakeResponse> {
  if (!backend.wakeShard) throw new ConnectError('this agent cannot wake shards', Code.Unimplemented);
  const id = shardOf(backend, req.shardId);
  auditAct(backend, ctx, { act: 'wake', shardId: id });
  const out = await backend.wakeShard(id);
  if ('refused' in out) throw new ConnectError(out.refused, Code.FailedPrecondition);
  return create(WakeResponseSchema, { shard: shardInfoOf(out.shard) });
}
