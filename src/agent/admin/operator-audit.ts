import type { HandlerContext } from '@connectrpc/connect';
import type { AdminBackend, OperatorAct } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';

/**
 * Records a change asked over the admin socket with the caller's uid, as the
 * kernel recorded it at connect() (ADMIN_PEER), never as the client says:
 * sleep, wake, drain, adopt and gpu clear, as cordon already did (security
 * review 4, F8). Called once the request is checked, before the change is
 * made, so a refused or failed change is on record too.
 */
export function auditAct(backend: AdminBackend, ctx: HandlerContext, act: Omit<OperatorAct, 'uid'>): void {
  backend.audit?.({ ...act, uid: ctx.values.get(ADMIN_PEER)?.uid });
}
