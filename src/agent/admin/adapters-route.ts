import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import type { AdaptersResponse } from '../../gen/llmgw/v1/admin_pb.js';
import { type AdapterSpec, AdapterSpecSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { isValidShardId, SHARD_ID_PATTERN } from '../../lib/shard-id.js';
import type { AdminBackend } from './admin-backend.js';
import { auditAct } from './operator-audit.js';
import { unknownShardError } from './unknown-shard-error.js';

/**
 * `ctl adapters` (issue 53): a shard's adapters (Adapters, a read: in
 * READ_METHODS); with load or unload (ChangeAdapters, a write the gate
 * refuses to the read tier), its desired set changed by one adapter and
 * reconciled as a SetAdapters from the control plane would (the same
 * checks, the same report on the stream), audited with the caller's uid,
 * answered once reconciled.
 */
/** What Adapters and ChangeAdapters both answer (AdaptersResponse's fields; ChangeAdaptersResponse has the same). */
export type AdaptersAnswer = Omit<AdaptersResponse, '$typeName' | '$unknown'>;

export async function adaptersRoute(backend: AdminBackend, req: { shardId: string; load?: AdapterSpec; unload?: string }, ctx: HandlerContext, change: boolean): Promise<AdaptersAnswer> {
  const adapters = backend.adapters;
  if (!adapters) throw new ConnectError('this agent serves no LoRA adapters', Code.Unimplemented);
  const id = req.shardId;
  if (!isValidShardId(id)) throw new ConnectError(`invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  if (!backend.shard(id)) throw unknownShardError(id, backend.nodeId, backend.shards());
  const load = req.load;
  const unload = req.unload ?? '';
  if (load && unload !== '') throw new ConnectError('load and unload one adapter at a time', Code.InvalidArgument);
  if (change && !load && unload === '') throw new ConnectError('ChangeAdapters needs load or unload', Code.InvalidArgument);
  if (change) {
    const desired = adapters.desired(id);
    let next = desired;
    if (load) {
      auditAct(backend, ctx, { act: 'adapters --load', shardId: id, detail: `${load.name}=${load.repo}@${load.revision || 'main'}` });
      next = [...desired.filter((a) => a.name !== load.name), create(AdapterSpecSchema, load)];
    } else {
      auditAct(backend, ctx, { act: 'adapters --unload', shardId: id, detail: unload });
      if (!desired.some((a) => a.name === unload)) {
        throw new ConnectError(`shard ${id} has no adapter ${JSON.stringify(unload.slice(0, 64))} in its desired set (${desired.map((a) => a.name).join(', ') || 'none'})`, Code.NotFound);
      }
      next = desired.filter((a) => a.name !== unload);
    }
    const out = await adapters.set(id, next);
    if ('refused' in out) throw new ConnectError(out.refused, Code.FailedPrecondition);
  }
  const limits = adapters.limits(id);
  return { shardId: id, adapters: adapters.statuses(id), desired: adapters.desired(id), maxAdapters: limits.maxLoaded, maxAdapterRank: limits.maxRank };
}
