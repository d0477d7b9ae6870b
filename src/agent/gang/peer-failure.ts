import { errnoCode } from '../../lib/errno.js';
import { errorMessage } from '../../lib/errors.js';

/**
 * What a failed ask of a peer (its agent, or its rank 0's engine) says of
 * that peer (issue 47). Only two failures are evidence:
 * - `refused`: the peer's kernel answered that nothing listens (a TCP reset to
 *   the SYN). The node is up; the process is not: an agent restart, or an
 *   engine whose socket closed with it.
 * - `silent`: nothing answered within the timeout, or the network says the host
 *   is not there: a node powered off, partitioned, or frozen (SIGSTOP) with
 *   its listen queue full.
 * Everything else is `unknown`, never a death: the peer's process accepted
 * and closed (a full connection cap resets), answered but not usefully, a
 * TLS handshake failed (a certificate is a configuration, not a pulse), or
 * the failure is ours (our TLS files unreadable, our descriptors spent, a
 * name our resolver cannot find).
 */
export type PeerFailureCause = 'refused' | 'silent' | 'unknown';

export interface PeerFailure {
  cause: PeerFailureCause;
  /** One line: "connect ECONNREFUSED", "no answer within 1500 ms". */
  why: string;
}

/** The failure of a connection or request to a peer, from its error. */
export function peerFailure(err: unknown): PeerFailure {
  const code = errnoCode(err);
  const why = code ? `connect ${code}` : errorMessage(err);
  switch (code) {
    // Nothing listens there: the node answered for the process.
    case 'ECONNREFUSED':
      return { cause: 'refused', why };
    // The kernel's own connect timeout, or no route to the host: nobody answers for it.
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'EHOSTDOWN':
    case 'ENETUNREACH':
      return { cause: 'silent', why };
    // Accepted, then reset or closed: a process is there (a peer's connection cap
    // resets past it, security review 4 F1); and EMFILE, ENFILE, EADDRNOTAVAIL,
    // ENOBUFS, ENOTFOUND, EAI_AGAIN, TLS errors: ours, or a configuration.
    default:
      return { cause: 'unknown', why };
  }
}

/** Nothing within `timeoutMs`: the peer is silent (no reset, no answer). */
export function noAnswerWithin(timeoutMs: number): PeerFailure {
  return { cause: 'silent', why: `no answer within ${timeoutMs} ms` };
}
