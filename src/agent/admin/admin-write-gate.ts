import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import { READ_METHODS } from '../../lib/admin-read-methods.js';
import { ADMIN_PEER } from './admin-peer.js';
import { ADMIN_ROLE, type AdminAccess } from './admin-role.js';

/**
 * Refuses every write of a caller of the read tier with one line (ctl exits
 * 77 on PermissionDenied), before its handler runs: nothing of the request
 * is acted on, nor audited as asked.
 */
export function writeGate(access: AdminAccess): Interceptor {
  return (next) => async (req) => {
    const role = req.contextValues.get(ADMIN_ROLE);
    if (role !== 'admin' && !READ_METHODS.has(req.method.name)) {
      const uid = req.contextValues.get(ADMIN_PEER)?.uid;
      const who = role === 'read' ? `uid ${uid} is in admin.read_group (${access.readGroup}), which may read but not change the node` : 'the agent cannot tell which group the caller is in';
      throw new ConnectError(`${who}: ${req.method.name} refused; ask to be added to ${access.adminGroup || 'the admin group'}`, Code.PermissionDenied);
    }
    return next(req);
  };
}
