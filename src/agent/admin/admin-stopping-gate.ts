import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import { READ_METHODS } from '../../lib/admin-read-methods.js';
import { agentStoppingRefusal } from '../../lib/agent-stopping-refusal.js';
import type { RateLimitedLog } from '../../lib/rate-limited-log.js';
import { ADMIN_PEER } from './admin-peer.js';

/**
 * Refuses every write once the agent has begun to stop (`stopping` aborts at
 * SIGTERM, before any of its files is closed), with one line that ctl prints
 * as is and exits 69 on (Unavailable): retry once the agent is back. Reads
 * (READ_METHODS) are still answered until the socket closes.
 *
 * Why a refusal and not "done": as the agent stops, its writers close one
 * after another (the adapter ledger at the stream's end, every shard's state
 * file at Supervisor.close()), and each ignores what is asked after that. A
 * `ctl drain` that arrived in between was answered "DRAINING", held in memory
 * only, and the next agent brought the shard back READY, traffic and all
 * (shut8's reproduction). Refused before its handler runs, a write is neither
 * acted on nor audited, as writeGate refuses the read tier's.
 */
export function stoppingGate(stopping: AbortSignal, log: RateLimitedLog): Interceptor {
  return (next) => async (req) => {
    if (stopping.aborted && !READ_METHODS.has(req.method.name)) {
      // Once per burst: a script retrying in a loop while a stop is held up must not fill the journal.
      log.info({ method: req.method.name, uid: req.contextValues.get(ADMIN_PEER)?.uid }, 'refused an admin write: the agent is stopping');
      throw new ConnectError(agentStoppingRefusal(req.method.name), Code.Unavailable);
    }
    return next(req);
  };
}
