import { type GangMember, ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../../lib/logger.js';
import type { ShardId } from '../../lib/shard-id.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { GangFault } from '../supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import { askPeer, type PeerReply, probePort } from './ask-peer.js';
import type { GangTlsRead } from './gang-tls.js';

/** How often each rank's peers are asked: a break is seen within about two of these (issue 40: within 5 s). */
export const GANG_POLL_INTERVAL_MS = 1_000;
/** A peer's agent or rendezvous port silent this long is silent this round. */
export const GANG_PEER_TIMEOUT_MS = 1_000;
/** Rounds in a row a rank 0 must be unreachable, its agent and its rendezvous port both, to break the gang: one lost packet is not a break. */
export const GANG_UNREACHABLE_ROUNDS = 2;
/**
 * How long a peer whose agent is unreachable, and whose engine has no port
 * to check (a vLLM headless worker listens on none), may stay so before the
 * gang is broken: an agent restart (an upgrade takes under a second) is not
 * a break; a node gone is one.
 */
export const GANG_AGENT_GRACE_MS = 10_000;

export interface GangWatchParts {
  nodeId: string;
  shards: () => readonly ShardSnapshot[];
  /** A shard's gang broke or stalled, or (undefined) is whole: Supervisor.gangChanged. */
  mark: (shardId: ShardId, fault: GangFault | undefined) => void;
  log: Logger;
  /** The TLS to ask peers with, read at each round (readGangTls); plaintext when absent. */
  tls?: () => GangTlsRead;
  ask?: (endpoint: string, gangId: string, timeoutMs: number) => Promise<PeerReply>;
  probe?: typeof probePort;
  intervalMs?: number;
  timeoutMs?: number;
  agentGraceMs?: number;
  now?: () => number;
}

/** What one round saw of one peer. */
type Seen = { kind: 'alive' } | { kind: 'broken'; reason: string; sinceMs: number } | { kind: 'stalled'; reason: string } | { kind: 'unknown' };

/** What the watch remembers of one peer of one shard between rounds. */
interface Track {
  /** The peer's agent once listed its rank: from then on, a rank it no longer lists is gone. */
  seenRank: boolean;
  /** The rendezvous port once accepted: from then on, a refusal counts. */
  seenOpen: boolean;
  failures: number;
  unreachableSinceMs?: number;
  brokenSinceMs?: number;
}

/** The states in which a rank serves its gang no more. */
const GONE = new Set(['FAILED', 'EXITED', 'STOPPED', 'STOPPING']);

/**
 * Watches the peers of every multi-node rank this node runs (issue 40), from
 * the node and whatever the control plane does: each second it asks each
 * peer's agent (its gang endpoint) how that rank is, and, for rank 0, whether
 * its rendezvous port (leader_addr:leader_port, which the leader's engine
 * holds open for the gang's life) accepts. A peer FAILED, EXITED, stopped or
 * no longer supervised, or a rank 0 unreachable by both ways two rounds in a
 * row, breaks the gang: the rank is marked (UNHEALTHY, or FAILED while
 * starting) with a reason naming the peer, and reported at once, or after
 * the control plane is back. A rank 0 that reports itself stalled marks
 * every rank stalled. The agent kills nothing here: the control plane fences
 * the gang as one (README "Multi-node replicas").
 */
export class GangWatch {
  readonly #p: GangWatchParts;
  readonly #tracks = new Map<string, Track>();
  readonly #ask: NonNullable<GangWatchParts['ask']>;
  readonly #probe: typeof probePort;
  readonly #now: () => number;
  #timer?: NodeJS.Timeout;
  #closed = false;

  constructor(p: GangWatchParts) {
    this.#p = p;
    this.#ask =
      p.ask ??
      ((endpoint, gangId, timeoutMs) => {
        const read = p.tls?.() ?? { tls: undefined };
        if ('error' in read) return Promise.resolve({ ok: false, why: `agent ${endpoint} not asked: ${read.error}` });
        return askPeer(endpoint, gangId, timeoutMs, read.tls);
      });
    this.#probe = p.probe ?? probePort;
    this.#now = p.now ?? Date.now;
  }

  start(): void {
    const loop = () => {
      if (this.#closed) return;
      void this.round().finally(() => {
        if (!this.#closed) this.#timer = setTimeout(loop, this.#p.intervalMs ?? GANG_POLL_INTERVAL_MS);
      });
    };
    loop();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** One look at every watched rank's peers; exported for tests, which drive rounds themselves. */
  async round(): Promise<void> {
    const watched = this.#p.shards().filter(isWatched);
    const keys = new Set<string>();
    await Promise.all(
      watched.map(async (s) => {
        const peers = peersOf(s);
        for (const m of peers) keys.add(`${s.shardId}/${m.rank}`);
        const seen = await Promise.all(peers.map(async (m) => ({ m, seen: await this.#look(s, m) })));
        if (this.#closed) return;
        const broken = seen.find((x) => x.seen.kind === 'broken');
        const stalled = seen.find((x) => x.seen.kind === 'stalled');
        const hit = broken ?? stalled;
        if (hit && (hit.seen.kind === 'broken' || hit.seen.kind === 'stalled')) {
          const fault: GangFault = {
            rank: hit.m.rank,
            nodeId: hit.m.nodeId,
            shardId: hit.m.shardId,
            reason: hit.seen.reason,
            sinceMs: hit.seen.kind === 'broken' ? hit.seen.sinceMs : this.#now(),
            stalled: hit.seen.kind === 'stalled',
          };
          const was = s.gangFault;
          if (!was || was.reason !== fault.reason || was.stalled !== fault.stalled) {
            this.#p.log.warn({ shard: s.shardId, gang: s.spec.gang?.gangId ?? s.replicaId, peerRank: fault.rank, peerNode: fault.nodeId }, `gang ${fault.stalled ? 'stalled' : 'broken'}: ${fault.reason}`);
          }
          this.#p.mark(s.shardId, fault);
        } else if (s.gangFault && seen.every((x) => x.seen.kind === 'alive')) {
          this.#p.log.info({ shard: s.shardId }, 'gang whole again: every peer rank answers');
          this.#p.mark(s.shardId, undefined);
        }
      }),
    );
    for (const k of this.#tracks.keys()) if (!keys.has(k)) this.#tracks.delete(k);
  }

  async #look(s: ShardSnapshot, m: GangMember): Promise<Seen> {
    const key = `${s.shardId}/${m.rank}`;
    const t = this.#tracks.get(key) ?? { seenRank: false, seenOpen: false, failures: 0 };
    this.#tracks.set(key, t);
    const timeoutMs = this.#p.timeoutMs ?? GANG_PEER_TIMEOUT_MS;
    const who = `rank ${m.rank} on ${m.nodeId || s.spec.leaderAddr || 'its node'}`;
    const now = this.#now();
    const alive = (): Seen => {
      t.failures = 0;
      t.unreachableSinceMs = undefined;
      t.brokenSinceMs = undefined;
      return { kind: 'alive' };
    };
    const broken = (reason: string): Seen => {
      t.brokenSinceMs ??= now;
      return { kind: 'broken', reason, sinceMs: t.brokenSinceMs };
    };
    let agentWhy = '';
    if (m.agentEndpoint !== '' && s.spec.gang) {
      const reply = await this.#ask(m.agentEndpoint, s.spec.gang.gangId, timeoutMs);
      if (reply.ok) {
        const rank = reply.answer.ranks.find((r) => r.rank === m.rank && (m.shardId === '' || r.shard === m.shardId));
        if (!rank) {
          // Its StartShard may not have reached it yet: a rank never listed breaks the gang only after the grace.
          if (t.seenRank || now - s.startedAtMs >= (this.#p.agentGraceMs ?? GANG_AGENT_GRACE_MS)) return broken(`${who} is not supervised there (its agent knows no shard ${m.shardId})`);
          return { kind: 'unknown' };
        }
        t.seenRank = true;
        if (GONE.has(rank.state) || !rank.running) return broken(`${who} is ${rank.state}${rank.error ? `: ${rank.error}` : ''}`);
        if (rank.stalled && m.rank === 0) return { kind: 'stalled', reason: `${who} stalled: ${rank.error}` };
        return alive();
      }
      agentWhy = reply.why;
    }
    // The agent said nothing (or there is none to ask): rank 0's engine holds its rendezvous port open.
    let portWhy = '';
    if (m.rank === 0 && s.spec.leaderAddr !== '' && s.spec.leaderPort > 0) {
      const port = await this.#probe(s.spec.leaderAddr, s.spec.leaderPort, timeoutMs);
      if (port.ok) {
        t.seenOpen = true;
        return alive();
      }
      portWhy = `rendezvous ${s.spec.leaderAddr}:${s.spec.leaderPort}: ${port.why}`;
      // Before the leader's engine first listened, a refusal means it is still starting.
      if (!t.seenOpen && s.state === ShardState.STARTING && agentWhy === '') return { kind: 'unknown' };
    } else if (agentWhy === '') {
      return { kind: 'unknown' };
    }
    t.failures++;
    t.unreachableSinceMs ??= now;
    const why = [agentWhy, portWhy].filter((w) => w !== '').join('; ');
    const reason = `${who} unreachable since ${new Date(t.unreachableSinceMs).toISOString()} (${why})`;
    const portSaysGone = portWhy !== '' && (t.seenOpen || s.state !== ShardState.STARTING);
    if (portSaysGone && t.failures >= GANG_UNREACHABLE_ROUNDS) return broken(reason);
    if (now - t.unreachableSinceMs >= (this.#p.agentGraceMs ?? GANG_AGENT_GRACE_MS)) return broken(reason);
    return { kind: 'unknown' };
  }
}

/** A rank of a multi-node replica whose engine still runs, not being stopped: the ones whose gang matters. */
function isWatched(s: ShardSnapshot): boolean {
  return s.spec.nnodes > 1 && s.running && !isTerminal(s.state) && s.state !== ShardState.STOPPING && s.state !== ShardState.UNSPECIFIED;
}

/** The ranks a shard watches: its gang's others, or (a control plane that sends no gang) rank 0 by its rendezvous port alone. */
function peersOf(s: ShardSnapshot): GangMember[] {
  if (s.spec.gang) return s.spec.gang.members.filter((m) => m.rank !== s.spec.rank);
  if (s.spec.rank === 0) return [];
  return [{ $typeName: 'llmgw.v1.GangMember', rank: 0, nodeId: '', shardId: '', agentEndpoint: '' }];
}
