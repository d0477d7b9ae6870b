import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import { type AdaptersRequest, type AdaptersResponse, AdaptersResponseSchema } from '../../gen/llmgw/v1/admin_pb.js';
import { AdapterSpecSchema } from '../../gen/llmgw/v1/agent_pb.js';
import { isValidShardId, SHARD_ID_PATTERN } from '../../lib/shard-id.js';
import type { AdminBackend } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';
import { ADMIN_ROLE } from './admin-role.js';
import { auditAct } from './operator-audit.js';
import { unknownShardError } from './unknown-shard-error.js';

/**
 * `ctl adapters` (issue 53): a shard's adapters; with load or unload, its
 * desired set changed by one adapter and reconciled as a SetAdapters from
 * the control plane would (the same checks, the same report on the
 * stream), answered once reconciled. Reading is for the read tier too (the
 * method is in READ_METHODS); a change is a write, refused to it here with
 * the write gate's words, and audited with the caller's uid.
 */
export async function adaptersRoute(backend: AdminBackend, req: AdaptersRequest, ctx: HandlerContext): Promise<AdaptersResponse> {
  const adapters = backend.adapters;
  if (!adapters) throw new ConnectError('this agent serves no LoRA adapters', Code.Unimplemented);
  const id = req.shardId;
  if (!isValidShardId(id)) throw new ConnectError(`invalid shard id ${JSON.stringify(String(id).slice(0, 40))}: it must match ${SHARD_ID_PATTERN.source}`, Code.InvalidArgument);
  if (!backend.shard(id)) throw unknownShardError(id, backend.nodeId, backend.shards());
  const load = req.load;
  if (load && req.unload !== '') throw new ConnectError('load and unload one adapter at a time', Code.InvalidArgument);
  if (load || req.unload !== '') {
    if (ctx.values.get(ADMIN_ROLE) !== 'admin') {
      throw new ConnectError(`uid ${ctx.values.get(ADMIN_PEER)?.uid} may read but not change the node: Adapters --${load ? 'load' : 'unload'} refused; ask to be added to the admin group`, Code.PermissionDenied);
    }
    const desired = adapters.desired(id);
    let next = desired;
    if (load) {
      auditAct(backend, ctx, { act: 'adapters --load', shardId: id, detail: `${load.name}=${load.repo}@${load.revision || 'main'}` });
      next = [...desired.filter((a) => a.name !== load.name), create(AdapterSpecSchema, load)];
    } else {
      auditAct(backend, ctx, { act: 'adapters --unload', shardId: id, detail: req.unload });
      if (!desired.some((a) => a.name === req.unload)) {
        throw new ConnectError(`shard ${id} has no adapter ${JSON.stringify(req.unload.slice(0, 64))} in its desired set (${desired.map((a) => a.name).join(', ') || 'none'})`, Code.NotFound);
      }
      next = desired.filter((a) => a.name !== req.unload);
    }
    const out = await adapters.set(id, next);
    if ('refused' in out) throw new ConnectError(out.refused, Code.FailedPrecondition);
  }
  const limits = adapters.limits(id);
  return create(AdaptersResponseSchema, { shardId: id, adapters: adapters.statuses(id), desired: adapters.desired(id), maxAdapters: limits.maxLoaded, maxAdapterRank: limits.maxRank });
}
