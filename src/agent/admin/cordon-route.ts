import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import { type CordonRequest, type CordonResponse, CordonResponseSchema } from '../../gen/llmgw/v1/admin_pb.js';
import { errorMessage } from '../../lib/errors.js';
import { cordonReasonProblem } from '../cordon-file.js';
import type { AdminBackend } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';

/**
 * `ctl cordon` / `ctl uncordon`: the reason is checked here, at the
 * socket's edge (one line, bounded: it is repeated in every refused start),
 * and the caller's uid recorded as the kernel gave it (SO_PEERCRED), not as
 * the client claims. The cordon is on disk before the answer goes out.
 */
export async function cordonRoute(backend: AdminBackend, req: CordonRequest, ctx: HandlerContext): Promise<CordonResponse> {
  if (!backend.cordon) throw new ConnectError('this agent cannot cordon its node', Code.Unimplemented);
  const reason = req.cordon ? req.reason.trim() : '';
  const problem = cordonReasonProblem(reason);
  if (problem) throw new ConnectError(`${problem}; give a shorter --reason`, Code.InvalidArgument);
  if (!req.cordon && req.reason !== '') throw new ConnectError('uncordon takes no reason', Code.InvalidArgument);
  const uid = ctx.values.get(ADMIN_PEER)?.uid ?? -1;
  const before = backend.cordon.current();
  let changed: boolean;
  try {
    changed = await backend.cordon.set(req.cordon, reason, uid);
  } catch (err) {
    // The file could not be written: the node is left as it was, and says so.
    throw new ConnectError(`cannot record the cordon in the state directory: ${errorMessage(err)}; the node is unchanged`, Code.FailedPrecondition);
  }
  const s = backend.cordon.current();
  return create(CordonResponseSchema, {
    cordoned: s !== undefined,
    reason: s?.reason ?? '',
    since: s ? timestampFromMs(s.sinceMs) : undefined,
    byUid: s?.byUid ?? -1,
    changed,
    // A second cordon replaces the first's reason: said, not silent (walkthrough 3).
    replacedReason: changed && req.cordon && before !== undefined ? before.reason : '',
  });
}
