import type { GangMember } from '../../gen/llmgw/v1/agent_pb.js';
import { errorMessage } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { ShardId } from '../../lib/shard-id.js';
import { isGangMember } from '../../lib/shard-states.js';
import type { GangFault } from '../supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import { askWithTls, type PeerReply, type ProbeResult, probeHealth, probePort } from './ask-peer.js';
import { rank0Evidence, rank0StartDeadlineMs } from './gang-liveness.js';
import type { GangTlsRead } from './gang-tls.js';
import { type AgentSaid, type EngineSaid, judgePeer, newPeerTrack, type PeerTrack, type Seen } from './judge-peer.js';

/** How often each rank's peers are asked, start to start: a round slower than this is followed at once by the next. */
export const GANG_POLL_INTERVAL_MS = 1_000;
/**
 * A peer's agent or rank 0's socket silent this long is silent this round.
 * Asks and probes run at once, so a round lasts at most this: a node that
 * goes silent (no reset: powered off, partitioned, frozen) is seen in
 * GANG_UNREACHABLE_ROUNDS rounds, at most one interval plus two of these
 * after it went (4 s; issue 47 asks 5 s).
 */
export const GANG_PEER_TIMEOUT_MS = 1_500;
export { GANG_UNREACHABLE_ROUNDS } from './judge-peer.js';
/**
 * How long a peer whose agent refuses connections (a restart: ECONNREFUSED),
 * and that nothing else shows alive or dead, may stay so before the gang is
 * broken: an agent restart (an upgrade takes under a second) is not a
 * break; a node gone is one. The default of gang_agent_grace.
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
  ask?: (endpoint: string, gangId: string, timeoutMs: number, nodeId?: string) => Promise<PeerReply>;
  /** Connects to rank 0's rendezvous port (a TCPStore). */
  probe?: typeof probePort;
  /** Asks rank 0's API /health (vLLM data-parallel, gang-liveness.ts). */
  probeHealth?: typeof probeHealth;
  intervalMs?: number;
  timeoutMs?: number;
  /** gang_agent_grace; GANG_AGENT_GRACE_MS when unset. */
  agentGraceMs?: number;
  now?: () => number;
}

/**
 * Watches the peers of every multi-node rank this node runs (issue 40), from
 * the node and whatever the control plane does: each second it asks each
 * peer's agent (its gang endpoint) how that rank is and, at the same time,
 * rank 0's engine by the socket that proves it alive after start-up
 * (gang-liveness.ts: the TCPStore at leader_addr:leader_port, or a vLLM
 * data-parallel rank 0's API /health). judgePeer decides: a peer FAILED,
 * EXITED, stopped or no longer supervised, a rank 0 whose socket refuses two
 * rounds in a row, a peer silent two rounds in a row, or one whose agent
 * refuses past the grace, breaks the gang: the rank is marked (UNHEALTHY,
 * or FAILED while starting) with a reason naming the peer, and reported at
 * once, or after the control plane is back. A rank 0 that reports itself
 * stalled marks every rank stalled. The agent kills nothing here: the
 * control plane fences the gang as one (docs/engines.md, "Multi-node replicas").
 */
export class GangWatch {
  readonly #p: GangWatchParts;
  readonly #tracks = new Map<string, PeerTrack>();
  readonly #ask: NonNullable<GangWatchParts['ask']>;
  readonly #probe: typeof probePort;
  readonly #probeHealth: typeof probeHealth;
  readonly #now: () => number;
  #timer?: NodeJS.Timeout;
  #closed = false;
  /** The loop while it runs; undefined before start() and while parked (no multi-node rank here). */
  #loop?: () => void;
  #parked = false;

  constructor(p: GangWatchParts) {
    this.#p = p;
    this.#ask = p.ask ?? askWithTls(p.tls);
    this.#probe = p.probe ?? probePort;
    this.#probeHealth = p.probeHealth ?? probeHealth;
    this.#now = p.now ?? Date.now;
  }

  /**
   * Rounds every interval, start to start, while this node runs a
   * multi-node rank; with none (most nodes, most of the time) the loop parks
   * until poke(), rather than wake the agent every second to look at
   * nothing (bench figures 5b and 16).
   */
  start(): void {
    const loop = () => {
      if (this.#closed) return;
      if (this.#p.shards().length === 0) {
        this.#tracks.clear();
        this.#parked = true;
        this.#timer = undefined;
        return;
      }
      const began = Date.now();
      void this.round().finally(() => {
        // Start to start: a round that waited out a silent peer is not followed by a second wait.
        const waitMs = Math.max(0, (this.#p.intervalMs ?? GANG_POLL_INTERVAL_MS) - (Date.now() - began));
        if (!this.#closed) this.#timer = setTimeout(loop, waitMs);
      });
    };
    this.#loop = loop;
    loop();
  }

  /**
   * A multi-node rank's shard changed (Supervisor.react): a parked loop
   * starts again with a round at once (out of the caller's stack), as the
   * first round for it would have come within an interval of it; a running
   * loop goes on as it was.
   */
  poke(): void {
    if (!this.#parked || this.#closed || !this.#loop) return;
    this.#parked = false;
    this.#timer = setTimeout(this.#loop, 0);
  }

  /** Whether the loop is parked (tests): started, and no multi-node rank to watch. */
  get parked(): boolean {
    return this.#parked;
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
    const t = this.#tracks.get(key) ?? newPeerTrack();
    this.#tracks.set(key, t);
    const timeoutMs = this.#p.timeoutMs ?? GANG_PEER_TIMEOUT_MS;
    const who = `rank ${m.rank} on ${m.nodeId || s.spec.leaderAddr || 'its node'}`;
    const now = this.#now();
    // At once, not one after the other: a silent peer costs one timeout per round, not two.
    // A bug of ours (a throw) is no word about the peer: unknown, never a round lost for every peer.
    const ours = (err: unknown) => ({ kind: 'failed', cause: 'unknown', why: `not asked: ${errorMessage(err)}` }) as const;
    const [agent, engine] = await Promise.all([
      this.#askAgent(s, m, timeoutMs).catch(ours),
      this.#probeEngine(s, m, timeoutMs).catch((err: unknown): EngineSaid => ({ ...ours(err), proof: 'rendezvous-port' })),
    ]);
    const agentGraceMs = this.#p.agentGraceMs ?? GANG_AGENT_GRACE_MS;
    const seen = judgePeer(t, { m, who, agent, engine, now, startedAtMs: s.startedAtMs, rank0DeadlineMs: rank0StartDeadlineMs(s.spec, s.startedAtMs), agentGraceMs });
    if (seen.kind === 'unknown' && seen.why !== undefined && seen.why !== t.loggedUnknown) {
      this.#p.log.warn({ shard: s.shardId, peerRank: m.rank, peerNode: m.nodeId }, `gang peer ${seen.why}: no evidence either way`);
      t.loggedUnknown = seen.why;
    }
    return seen;
  }

  async #askAgent(s: ShardSnapshot, m: GangMember, timeoutMs: number): Promise<AgentSaid> {
    if (m.agentEndpoint === '' || !s.spec.gang) return { kind: 'none' };
    const reply: PeerReply = await this.#ask(m.agentEndpoint, s.spec.gang.gangId, timeoutMs, m.nodeId);
    return reply.ok ? { kind: 'answered', answer: reply.answer } : { kind: 'failed', cause: reply.cause, why: reply.why };
  }

  async #probeEngine(s: ShardSnapshot, m: GangMember, timeoutMs: number): Promise<EngineSaid> {
    const e = rank0Evidence(s.spec, m);
    if (e.kind === 'none') return { kind: 'none' };
    const r: ProbeResult = await (e.kind === 'api-health' ? this.#probeHealth : this.#probe)(e.host, e.port, timeoutMs);
    return r.ok ? { kind: 'open' } : { kind: 'failed', cause: r.cause, why: `${e.label}: ${r.why}`, proof: e.kind, ...(r.accepted ? { accepted: true } : {}) };
  }
}

/** A rank of a multi-node replica whose engine still runs, not being stopped: the ones whose gang matters. */
function isWatched(s: ShardSnapshot): boolean {
  return s.spec.nnodes > 1 && s.running && isGangMember(s.state);
}

/** The ranks a shard watches: its gang's others, or (a control plane that sends no gang) rank 0 by its rendezvous port alone. */
function peersOf(s: ShardSnapshot): GangMember[] {
  if (s.spec.gang) return s.spec.gang.members.filter((m) => m.rank !== s.spec.rank);
  if (s.spec.rank === 0) return [];
  return [{ $typeName: 'llmgw.v1.GangMember', rank: 0, nodeId: '', shardId: '', agentEndpoint: '', httpPort: 0 }];
}
