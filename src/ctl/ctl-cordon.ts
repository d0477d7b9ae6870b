import type { CordonResponseJson } from '../gen/llmgw/v1/admin_pb.js';
import { usageError } from '../lib/errors.js';
import { callUnaryJson } from './call-unary-json.js';

/** Why a reason cannot go to the agent; checked here too, so a usage error is exit 2 before any call. */
const MAX_REASON_CHARS = 200;

/**
 * Cordons the node (new starts refused with `reason`, running shards kept)
 * or uncordons it. The agent records it in its state directory before it
 * answers, and tells the control plane.
 */
export function ctlCordon(socket: string, cordon: boolean, reason = ''): Promise<CordonResponseJson> {
  if (reason.length > MAX_REASON_CHARS) throw usageError(`--reason is ${reason.length} characters; at most ${MAX_REASON_CHARS}`);
  if (/[\r\n]/.test(reason)) throw usageError('--reason must be one line');
  return callUnaryJson<CordonResponseJson>(socket, 'Cordon', { cordon, reason });
}

/** One line an operator reads: what the node is now, and whether this call changed it. */
export function describeCordon(r: CordonResponseJson): string {
  if (!r.cordoned) return r.changed ? 'node uncordoned: new shards may start' : 'node was not cordoned';
  const why = r.reason ? ` (${r.reason})` : '';
  const by = r.byUid !== undefined && r.byUid >= 0 ? ` by uid ${r.byUid}` : '';
  const head = r.changed ? (r.replacedReason !== undefined && r.replacedReason !== '' ? `node's cordon reason replaced (was: ${r.replacedReason})` : 'node cordoned') : 'node already cordoned';
  return `${head} since ${r.since}${by}${why}: new shards are refused, running ones keep serving; llmgw ctl uncordon undoes it`;
}
