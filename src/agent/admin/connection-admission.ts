import type { Socket } from 'node:net';
import type { PeerCredentials, UnknownPeer } from '../../lib/process/peer-credentials.js';

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

/** Why one was not, as the client is told (the Connect code, and what failed then what to do). */
export interface Refused {
  peer: PeerCredentials | undefined;
  code: 'resource_exhausted' | 'permission_denied';
  why: string;
  action: string;
}

/** What a client refused for the caps is told to do. */
const FREE_A_SLOT = 'end other ctl calls or scripts on its socket and try again';

/**
 * Who may open another admin connection, judged at accept by the peer's
 * uid as the kernel recorded it (SO_PEERCRED; nothing the client says).
 * Where the uid cannot be read, the connection is refused: counted under
 * no uid, a member of admin.group could take every slot but root's and
 * lock the other operators out, the per-user cap silently off (review 2,
 * N8). Root is refused too, since nothing tells it from anyone else.
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

  /** `peer`: readPeerCredentials of the accepted socket. */
  admit(peer: PeerCredentials | UnknownPeer): Admitted | Refused {
    if ('unknown' in peer) {
      return {
        peer: undefined,
        code: 'permission_denied',
        why: `it cannot read which user connected (${peer.unknown}), so it lets no one in rather than run without its per-user limits`,
        action: 'the agent logged why when it first refused one (journalctl -u llmgw-agent); docs/security.md, "Peer credentials", says what the agent needs',
      };
    }
    const uid = peer.uid;
    const privileged = this.privileged.has(uid);
    if (privileged ? this.open >= this.max : this.open >= this.max - this.reserved) {
      const why = `${this.open} connections are open, the most ${privileged ? 'there may be' : `users other than root may hold (${this.reserved} are kept for root)`}`;
      return { peer, code: 'resource_exhausted', why, action: FREE_A_SLOT };
    }
    const mine = this.perUid.get(uid) ?? 0;
    if (!privileged && mine >= this.perUser) {
      return { peer, code: 'resource_exhausted', why: `uid ${uid} holds ${mine} connections, the most one user other than root may`, action: FREE_A_SLOT };
    }
    this.open += 1;
    this.perUid.set(uid, mine + 1);
    let released = false;
    return {
      peer,
      release: () => {
        if (released) return;
        released = true;
        this.open -= 1;
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

/** The HTTP status of each Connect code a refusal carries (the Connect protocol's mapping). */
const HTTP_STATUS: Readonly<Record<Refused['code'], string>> = {
  resource_exhausted: '429 Too Many Requests',
  permission_denied: '403 Forbidden',
};

/**
 * Tells a refused client why, then closes: an HTTP/1.1 answer with the
 * refusal's Connect error, which ctl prints as it is (its unary
 * calls, status and adopt, speak HTTP/1.1 first). Closed without a word,
 * ctl said the agent "answered HTTP 0". The answer is written before the
 * request is read and the write side shut (end), while what the client
 * sends is read and dropped, so its request write does not fail before it
 * has read the answer. The socket goes when the client closes, or after
 * REFUSAL_LINGER_MS; at most MAX_ANSWERING linger at once.
 */
export function refuseConnection(socket: Socket, refused: Pick<Refused, 'code' | 'why' | 'action'>): void {
  if (answering >= MAX_ANSWERING) {
    socket.destroy();
    return;
  }
  answering += 1;
  const body = JSON.stringify({ code: refused.code, message: `the agent refused the connection: ${refused.why}; ${refused.action}` });
  const cut = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS);
  cut.unref();
  socket.once('close', () => {
    answering -= 1;
    clearTimeout(cut);
  });
  socket.on('error', () => {});
  socket.resume();
  socket.end(`HTTP/1.1 ${HTTP_STATUS[refused.code]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
