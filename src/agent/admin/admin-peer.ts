import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import type { Socket } from 'node:net';
import { type ContextValues, createContextKey, createContextValues } from '@connectrpc/connect';
import { type PeerCredentials, peerCredentials } from '../../lib/process/peer-credentials.js';
import { ADMIN_ROLE, type AdminAccess, roleOf } from './admin-role.js';

/** Who made an admin call, as the kernel recorded it at connect(); undefined when it cannot be read. */
export const ADMIN_PEER = createContextKey<PeerCredentials | undefined>(undefined, { description: 'the admin client, by SO_PEERCRED' });

/**
 * The context values of an admin call: its peer, for the per-user caps of
 * the handlers (log-call-admission.ts), and its tier (admin-role.ts). Read again from the connection's
 * socket, which is the same answer the connection was admitted with
 * (SO_PEERCRED is fixed at connect()): an HTTP/2 request's socket is Node's
 * proxy for the session's, which passes the descriptor through.
 */
export function adminCallValues(req: IncomingMessage | Http2ServerRequest, access?: AdminAccess): ContextValues {
  const peer = peerCredentials(req.socket as Socket);
  return createContextValues()
    .set(ADMIN_PEER, peer)
    .set(ADMIN_ROLE, peer && roleOf(peer, access));
}
