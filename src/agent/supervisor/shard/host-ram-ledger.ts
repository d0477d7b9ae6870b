/*
 * Host RAM promised to sleeps under way (security review 4, F8; issue 48
 * item 7). A level-1 sleep copies the weights to pinned host RAM, and its
 * check (checkHostRoom) reads MemAvailable before the copy starts: eight
 * concurrent sleeps each passed it against the same free memory before
 * any had copied a byte, together several times what the host had. A
 * failed cudaMallocHost ends SGLang's scheduler; past the host's memory the
 * OOM killer picks a process. So each sleep that needs room claims it here,
 * synchronously, before it reads MemAvailable, and is judged against what
 * is left after the claims made before it; the claim is held until its
 * sleep has finished (its copy is then in MemAvailable's figure itself) or
 * was refused.
 */

/** One sleep's claim: what was promised before it, and its release. */
export interface HostRamClaim {
  /** MiB promised now to sleeps that claimed before this one and have not finished, and their shards. */
  ahead(): { mib: number; shards: string[] };
  /** Ends the claim; a second call does nothing. */
  release(): void;
}

export class HostRamLedger {
  #next = 0;
  readonly #held = new Map<number, { shardId: string; mib: number }>();

  /**
   * Claims `mib` for a sleep of `shardId`. Synchronous: of two sleeps asked
   * together, the first to claim is judged without the second, and the
   * second with the first, so the first sleeps and the second is refused
   * rather than both being refused or both admitted.
   */
  claim(shardId: string, mib: number): HostRamClaim {
    const seq = ++this.#next;
    this.#held.set(seq, { shardId, mib });
    // Read when judged, not when claimed: a sleep ahead that finished meanwhile has its copy in MemAvailable already.
    const ahead = () => {
      const out = { mib: 0, shards: [] as string[] };
      for (const [s, c] of this.#held) {
        if (s >= seq) continue;
        out.mib += c.mib;
        out.shards.push(c.shardId);
      }
      return out;
    };
    return { ahead, release: () => void this.#held.delete(seq) };
  }

  /** MiB promised now, over every claim held. */
  promisedMib(): number {
    let sum = 0;
    for (const c of this.#held.values()) sum += c.mib;
    return sum;
  }
}
