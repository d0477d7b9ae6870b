import type { Socket } from 'node:net';
import type { PeerCredentials } from '../../lib/process/peer-credentials.js';

/**
 * Connections open at once, whoever holds them. Operators and scripts on one
 * node make a few ctl calls at a time, each on its own short connection;
 * five thousand held open by one admin-group member cost 5,000 fds and
 * 220 MB in the review (finding 3). Measured: 1,024 open sessions put the
 * agent's peak RSS at 166 MB, so the cap is well below.
 */
export const MAX_ADMIN_CONNECTIONS = 256;
/** Of those, the ones only root (or the agent's own user) may take: ctl as root always gets in, also while others fill the rest. */
export const ROOT_RESERVED_CONNECTIONS = 32;
/** Connections one other user may hold at once: one admin-group member, or a script run away, cannot take every slot from the others. */
export const MAX_CONNECTIONS_PER_USER = 64;

export interface AdmissionLimits {
  maxConnections?: number;
  rootReserved?: number;
  perUser?: number;
}

/** A connection let in, to be released when it closes. */
export interface Admitted {
  peer: PeerCredentials | undefined;
  release(): void;
}

/** Why one was not. */
export interface Refused {
  peer: PeerCredentials | undefined;
  why: string;
}

/**
 * Who may open another admin connection, judged at accept by the peer's
 * uid as the kernel recorded it (SO_PEERCRED; nothing the client says).
 * Where the uid cannot be read (no FFI), every connection counts as another
 * user's, under the total cap only.
 */
export class ConnectionAdmission {
  private open = 0;
  private readonly perUid = new Map<number, number>();
  private readonly max: number;
  private readonly reserved: number;
  private readonly perUser: number;
  private readonly privileged = new Set([0, process.geteuid?.() ?? 0]);

  constructor(limits: AdmissionLimits = {}) {
    this.max = limits.maxConnections ?? MAX_ADMIN_CONNECTIONS;
    // A small cap (tests) keeps at least one slot for others, and no more reserve than the cap.
    this.reserved = Math.min(limits.rootReserved ?? ROOT_RESERVED_CONNECTIONS, Math.floor(this.max / 8));
    this.perUser = limits.perUser ?? MAX_CONNECTIONS_PER_USER;
  }

  get size(): number {
    return this.open;
  }

  /** `peer`: peerCredentials of the accepted socket; undefined where they cannot be read. */
  admit(peer: PeerCredentials | undefined): Admitted | Refused {
    const uid = peer?.uid;
    const privileged = uid !== undefined && this.privileged.has(uid);
    if (privileged ? this.open >= this.max : this.open >= this.max - this.reserved) {
      return { peer, why: `${this.open} connections are open, the most ${privileged ? 'there may be' : `users other than root may hold (${this.reserved} are kept for root)`}` };
    }
    const mine = uid === undefined ? 0 : (this.perUid.get(uid) ?? 0);
    if (!privileged && uid !== undefined && mine >= this.perUser) {
      return { peer, why: `uid ${uid} holds ${mine} connections, the most one user other than root may` };
    }
    this.open += 1;
    if (uid !== undefined) this.perUid.set(uid, mine + 1);
    let released = false;
    return {
      peer,
      release: () => {
        if (released) return;
        released = true;
        this.open -= 1;
        if (uid === undefined) return;
        const left = (this.perUid.get(uid) ?? 1) - 1;
        if (left === 0) this.perUid.delete(uid);
        else this.perUid.set(uid, left);
      },
    };
  }
}

/** How long a refused connection may take to read its answer and close before it is cut. */
const REFUSAL_LINGER_MS = 1000;
/** Refused connections being answered at once; past this, one is closed without a word, so a flood holds few fds. */
const MAX_ANSWERING = 64;
let answering = 0;

/**
 * Tells a refused client why, then closes: an HTTP/1.1 answer with the
 * Connect error `resource_exhausted`, which ctl prints as it is (its unary
 * calls, status and adopt, speak HTTP/1.1 first). Closed without a word,
 * ctl said the agent "answered HTTP 0". The answer is written before the
 * request is read and the write side shut (end), while what the client
 * sends is read and dropped, so its request write does not fail before it
 * has read the answer. The socket goes when the client closes, or after
 * REFUSAL_LINGER_MS; at most MAX_ANSWERING linger at once.
 */
export function refuseConnection(socket: Socket, why: string): void {
  if (answering >= MAX_ANSWERING) {
    socket.destroy();
    return;
  }
  answering += 1;
  const body = JSON.stringify({
    code: 'resource_exhausted',
    message: `the agent refused the connection: ${why}; end other ctl calls or scripts on its socket and try again`,
  });
  const cut = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS);
  cut.unref();
  socket.once('close', () => {
    answering -= 1;
    clearTimeout(cut);
  });
  socket.on('error', () => {});
  socket.resume();
  socket.end(`HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
