/**
 * Log reads in progress at once for one user other than root: a tail, or a
 * follow's backlog, each reading up to TAIL_MAX_BYTES of a log. ctl makes
 * one per command. Without a cap one admin-group member ran 4 connections ×
 * 32 streams of lines=2^31-1 on a 17 MB log and took the agent from 75 MB
 * to 5.7 GB, root's ctl status unanswered (security review 2, N3).
 */
export const MAX_LOG_READS_PER_USER = 4;
/** Log reads in progress at once, whoever makes them: each holds about a chunk, and reads the disk. */
export const MAX_LOG_READS = 16;
/** Of those, the ones only root (or the agent's own user) may take: root reads a log also while members hold the rest. */
export const ROOT_RESERVED_LOG_READS = 4;
/**
 * Follows (`ctl logs -f`) one user other than root may have open at once:
 * one per shard of an 8-GPU node, twice over. Each polls its log every
 * FOLLOW_POLL_MS for as long as it is open; 32 streams on each of 64
 * connections would have been 2,048 of them.
 */
export const MAX_FOLLOWS_PER_USER = 16;
/** Follows open at once, whoever holds them. */
export const MAX_FOLLOWS = 64;
/** Of those, the ones kept for root and the agent's own user. */
export const ROOT_RESERVED_FOLLOWS = 8;

/** One kind of slot: how many there are, how many one other user may hold, how many only root may take. */
export interface SlotLimits {
  total: number;
  perUser: number;
  rootReserved: number;
}

export interface LogCallLimits {
  reads?: Partial<SlotLimits>;
  follows?: Partial<SlotLimits>;
}

/** A slot taken; release() is idempotent, so both the end of the call and the client leaving may give it back. */
export interface Claimed {
  release(): void;
}

/** A slot refused: what failed and the cap it met, for the client's resource_exhausted message. */
export interface Refused {
  why: string;
}

export type LogSlotKind = 'read' | 'follow';

const NOUN: Record<LogSlotKind, string> = { read: 'log reads', follow: 'log follows' };

/**
 * Who may start another Logs read or follow, by the peer uid the kernel
 * gave for the connection (admin-peer.ts). A uid the agent could not learn
 * counts as one more user, never as root: it shares one user's slots.
 * Synchronous claims, as for launches (launch-admission.ts): checked and
 * taken in one step, so a burst of calls cannot all pass the check before
 * any counts.
 */
export class LogCallAdmission {
  private readonly pools: Record<LogSlotKind, SlotPool>;

  constructor(limits: LogCallLimits = {}) {
    this.pools = {
      read: new SlotPool({ total: MAX_LOG_READS, perUser: MAX_LOG_READS_PER_USER, rootReserved: ROOT_RESERVED_LOG_READS, ...limits.reads }),
      follow: new SlotPool({ total: MAX_FOLLOWS, perUser: MAX_FOLLOWS_PER_USER, rootReserved: ROOT_RESERVED_FOLLOWS, ...limits.follows }),
    };
  }

  /** Slots of `kind` held now, by everyone. */
  held(kind: LogSlotKind): number {
    return this.pools[kind].held;
  }

  /** `uid`: the peer's; undefined when the agent could not read it. */
  claim(kind: LogSlotKind, uid: number | undefined): Claimed | Refused {
    return this.pools[kind].claim(uid, NOUN[kind]);
  }
}

/** uid 0 and the agent's own: the operators a member must never lock out. */
const PRIVILEGED = new Set([0, process.geteuid?.() ?? 0]);
/** Where calls of an unknown uid are counted: all of them together, as one user. */
const UNKNOWN_UID = -1;

/** Slots of one kind, claimed by uid; also what bounds `ctl events -f` (events-route.ts). */
export class SlotPool {
  held = 0;
  private readonly perUid = new Map<number, number>();

  constructor(private readonly limits: SlotLimits) {}

  claim(uid: number | undefined, noun: string): Claimed | Refused {
    const privileged = uid !== undefined && PRIVILEGED.has(uid);
    const { total, perUser } = this.limits;
    // A small total (tests) keeps at least one slot for others.
    const reserved = Math.min(this.limits.rootReserved, total - 1);
    if (privileged ? this.held >= total : this.held >= total - reserved) {
      const most = privileged ? 'the most there may be' : `the most users other than root may hold (${reserved} are kept for root)`;
      return { why: `${this.held} ${noun} are in progress, ${most}` };
    }
    const key = uid ?? UNKNOWN_UID;
    const mine = this.perUid.get(key) ?? 0;
    if (!privileged && mine >= perUser) {
      const who = uid === undefined ? 'connections whose uid is unknown have' : `uid ${uid} has`;
      return { why: `${who} ${mine} ${noun} in progress, the most one user other than root may` };
    }
    this.held += 1;
    this.perUid.set(key, mine + 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.held -= 1;
        const left = (this.perUid.get(key) ?? 1) - 1;
        if (left === 0) this.perUid.delete(key);
        else this.perUid.set(key, left);
      },
    };
  }
}
