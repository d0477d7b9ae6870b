import type { GangMember } from '../../gen/llmgw/v1/agent_pb.js';
import { isLeaving, stateNamed } from '../../lib/shard-states.js';
import type { GangAnswer } from './gang-answer.js';
import type { PeerFailureCause } from './peer-failure.js';

/** Rounds in a row a peer must be gone by the evidence (its rank 0's socket refused, or the peer silent) to break the gang: one lost packet is not a break. */
export const GANG_UNREACHABLE_ROUNDS = 2;

/** What one round saw of one peer. `why` says, for an unknown, what could not be judged. */
export type Seen =
  | { kind: 'alive' }
  | { kind: 'broken'; reason: string; sinceMs: number }
  | { kind: 'stalled'; reason: string }
  | { kind: 'unknown'; why?: string };

/** What the watch remembers of one peer of one shard between rounds. */
export interface PeerTrack {
  /** The peer's agent once listed its rank: from then on, a rank it no longer lists is gone. */
  seenRank: boolean;
  /** Rank 0's socket once accepted: from then on, a refusal counts. */
  seenOpen: boolean;
  /** Rounds in a row rank 0's socket said its engine is gone, with its agent not answering. */
  downRounds: number;
  /** Rounds in a row nothing answered for the peer at all. */
  silentRounds: number;
  unreachableSinceMs?: number;
  brokenSinceMs?: number;
  /** The last "unknown" reason logged, so that it is logged once. */
  loggedUnknown?: string;
}

export const newPeerTrack = (): PeerTrack => ({ seenRank: false, seenOpen: false, downRounds: 0, silentRounds: 0 });

/** What the peer's agent said this round: its answer, why it said none, or (no endpoint) nothing was asked. */
export type AgentSaid = { kind: 'answered'; answer: GangAnswer } | { kind: 'failed'; cause: PeerFailureCause; why: string } | { kind: 'none' };

/** What rank 0's socket said this round (gang-liveness.ts); `none` for a peer with no socket to ask. */
export type EngineSaid =
  | { kind: 'open' }
  /** `accepted`: the socket is bound (an API answering 503): its refusal counts at once. */
  | { kind: 'failed'; cause: PeerFailureCause; why: string; proof: 'rendezvous-port' | 'api-health'; accepted?: boolean }
  | { kind: 'none' };

export interface PeerRound {
  m: GangMember;
  who: string;
  agent: AgentSaid;
  engine: EngineSaid;
  now: number;
  /** When this rank's shard started: a peer not yet listed by its agent is waited for the grace from it. */
  startedAtMs: number;
  /** Until when rank 0's socket never yet seen open proves nothing (rank0StartDeadlineMs). */
  rank0DeadlineMs: number;
  /** How long a peer whose agent refuses, with nothing else to judge it by, may stay so (GANG_AGENT_GRACE_MS). */
  agentGraceMs: number;
}

/**
 * Whether a rank whose agent names its state `name` (gang-answer.ts) serves
 * its gang no more: stopping or ended. A name this build does not know (a
 * newer agent's) is not taken for gone.
 */
export function isGoneFromGang(name: string): boolean {
  const state = stateNamed(name);
  return state !== undefined && isLeaving(state);
}

/**
 * One round's judgement of one peer (issue 40, issue 47), in this order:
 * 1. Its agent answered: its word decides (gone, stalled, alive), over any socket.
 * 2. Rank 0's socket accepted (or /health 200): alive, whatever its agent (a restart).
 * 3. Rank 0's socket refused, once seen open or past rank 0's start-up deadline:
 *    its engine is gone; two rounds in a row break the gang.
 * 4. Nothing answered at all (its agent silent, its socket silent or none): a
 *    node powered off, partitioned or frozen; two rounds in a row break it.
 * 5. Its agent refused (an agent restart) with nothing else to go by: broken
 *    only once unreachable for the agent grace.
 * Anything else (a failure of ours, a socket that answered oddly, a port not
 * yet bound, an API slow to answer with no agent to ask) is unknown.
 */
export function judgePeer(t: PeerTrack, r: PeerRound): Seen {
  const { now, who } = r;
  // The socket is asked every round, the agent's word deciding or not: once seen open, its refusal counts
  // (without this, a rank 0 whose agent always answered had never been "seen open", and its whole node
  // gone waited out the agent grace, 10 s, instead of two rounds).
  if (r.engine.kind === 'open' || (r.engine.kind === 'failed' && r.engine.accepted)) t.seenOpen = true;
  const alive = (): Seen => {
    Object.assign(t, { downRounds: 0, silentRounds: 0, unreachableSinceMs: undefined, brokenSinceMs: undefined, loggedUnknown: undefined });
    return { kind: 'alive' };
  };
  const broken = (reason: string): Seen => {
    t.brokenSinceMs ??= now;
    return { kind: 'broken', reason, sinceMs: t.brokenSinceMs };
  };
  if (r.agent.kind === 'answered') {
    const rank = r.agent.answer.ranks.find((x) => x.rank === r.m.rank && (r.m.shardId === '' || x.shard === r.m.shardId));
    if (!rank) {
      // Its StartShard may not have reached it yet: a rank never listed breaks the gang only after the grace.
      if (t.seenRank || now - r.startedAtMs >= r.agentGraceMs) return broken(`${who} is not supervised there (its agent knows no shard ${r.m.shardId})`);
      return { kind: 'unknown' };
    }
    t.seenRank = true;
    if (isGoneFromGang(rank.state)) return broken(`${who} is ${rank.state}${rank.error ? `: ${rank.error}` : ''}`);
    // Its engine is gone and its agent is still telling how (first-to-go.ts asks its peers first): broken now, named by its state once told.
    if (!rank.running) return broken(`${who}'s engine ended${rank.endedAtMs !== undefined ? ` at ${new Date(rank.endedAtMs).toISOString()}` : ''}; its agent is still telling how`);
    if (rank.stalled && r.m.rank === 0) return { kind: 'stalled', reason: `${who} stalled: ${rank.error}` };
    return alive();
  }
  if (r.engine.kind === 'open') {
    t.seenOpen = true;
    return alive();
  }
  const agent = r.agent.kind === 'failed' ? r.agent : undefined;
  const engine = r.engine.kind === 'failed' ? r.engine : undefined;
  const why = [agent?.why, engine?.why].filter((w) => w !== undefined).join('; ');
  const unreachable = (): string => {
    t.unreachableSinceMs ??= now;
    return `${who} unreachable since ${new Date(t.unreachableSinceMs).toISOString()} (${why})`;
  };
  // 3. The engine's own socket refused: only once it could have been bound.
  if (engine?.accepted) t.seenOpen = true;
  const bound = t.seenOpen || now >= r.rank0DeadlineMs;
  if (engine?.cause === 'refused' && bound) {
    t.silentRounds = 0;
    t.downRounds++;
    const reason = unreachable();
    return t.downRounds >= GANG_UNREACHABLE_ROUNDS ? broken(reason) : { kind: 'unknown' };
  }
  t.downRounds = 0;
  // 4. Silence: no reset, no answer. A slow /health with no agent to ask is a busy API, not a silent node.
  const engineSilent = r.engine.kind === 'none' || (engine !== undefined && engine.cause !== 'unknown' && (engine.cause === 'silent' || agent !== undefined));
  const agentSilent = agent?.cause === 'silent' || (r.agent.kind === 'none' && engine?.cause === 'silent' && engine.proof === 'rendezvous-port');
  if (agentSilent && engineSilent) {
    t.silentRounds++;
    const reason = unreachable();
    return t.silentRounds >= GANG_UNREACHABLE_ROUNDS ? broken(reason) : { kind: 'unknown' };
  }
  t.silentRounds = 0;
  // 5. The agent refused: a restart, unless it lasts the grace.
  if (agent?.cause === 'refused') {
    const reason = unreachable();
    return now - (t.unreachableSinceMs ?? now) >= r.agentGraceMs ? broken(reason) : { kind: 'unknown' };
  }
  // Something accepted on its agent's port (an odd answer, a reset past a connection cap, another uid's or
  // another node's answer): its refusals were not one outage. Without this, a restart's refusal, then a
  // squatter's answers for longer than the grace, then the refusal as the squatter leaves (the agent takes its
  // port within 2 s) broke the gang on that last refusal (issue 48 acceptance e2e).
  if (agent?.cause === 'unknown') t.unreachableSinceMs = undefined;
  // Nothing here is evidence of death: a failure of ours, an odd answer, a socket not yet bound.
  return { kind: 'unknown', ...(why !== '' ? { why: `${who}: not judged (${why})` } : {}) };
}
