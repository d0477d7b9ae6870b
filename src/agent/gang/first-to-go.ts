import type { GangFault } from '../supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';
import type { PeerReply } from './ask-peer.js';
import { GANG_PEER_TIMEOUT_MS } from './gang-watch.js';
import { isGoneFromGang } from './judge-peer.js';

/**
 * How a rank whose own engine ended asks its peers once who went first
 * (issue 47 item 3), before it reports FAILED: its report waits at most this.
 */
export const FIRST_TO_GO_ASK_MS = GANG_PEER_TIMEOUT_MS;

/** Asks a peer's agent; `nodeId`, the member's, is the node its certificate and answer must name (askPeer). */
export type AskPeer = (endpoint: string, gangId: string, timeoutMs: number, nodeId?: string) => Promise<PeerReply>;

/**
 * The peer rank that went before this one, or undefined when this rank went
 * first (or alone, or nobody could say). A gang's survivors end too: SGLang
 * ranks within about a second of a peer's death (a gloo broadcast every
 * scheduler loop, S:python/sglang/srt/managers/scheduler_components/request_receiver.py:153-216,
 * then SIGQUIT of its own tree, S:python/sglang/srt/managers/scheduler.py:5066-5069);
 * vLLM's rank 0 with a request in a step after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
 * (300 s, V:vllm/v1/executor/multiproc_executor.py:340-364, V:vllm/envs.py:1767-1769).
 * Without this, each survivor's own exit is what its agent reports, and a
 * control plane (or a person reading `ctl status`) blames a healthy node.
 *
 * What names a peer, first found first:
 * - the gang watch had already marked this rank broken by a peer: that peer;
 * - a peer whose agent says its rank ended (FAILED, EXITED, stopped, not
 *   running) before this one (GangRankAnswer.endedAtMs, its node's clock;
 *   the earliest of them); an agent too old to say when is taken at its word;
 * - a peer that cannot be reached (refused, silent) within FIRST_TO_GO_ASK_MS.
 * A peer that ended after this rank followed it; one still running was not
 * first; a failure of ours says nothing.
 */
export async function firstToGo(ask: AskPeer, shard: ShardSnapshot, endedAtMs: number, timeoutMs = FIRST_TO_GO_ASK_MS): Promise<GangFault | undefined> {
  const known = shard.gangFault;
  if (known && !known.stalled) return { ...known, firstToGo: true };
  const gang = shard.spec.gang;
  if (!gang || shard.spec.nnodes <= 1) return undefined;
  const peers = gang.members.filter((m) => m.rank !== shard.spec.rank && m.agentEndpoint !== '');
  const said = await Promise.all(peers.map(async (m) => ({ m, reply: await ask(m.agentEndpoint, gang.gangId, timeoutMs, m.nodeId) })));
  let first: { fault: GangFault; atMs: number } | undefined;
  let unreachable: GangFault | undefined;
  for (const { m, reply } of said) {
    const who = `rank ${m.rank} on ${m.nodeId}`;
    const fault = (reason: string, sinceMs: number): GangFault => ({ rank: m.rank, nodeId: m.nodeId, shardId: m.shardId, reason, sinceMs, stalled: false, firstToGo: true });
    if (!reply.ok) {
      if (reply.cause !== 'unknown') unreachable ??= fault(`${who} went first: unreachable as this rank ended (${reply.why})`, endedAtMs);
      continue;
    }
    const rank = reply.answer.ranks.find((r) => r.rank === m.rank && r.shard === m.shardId);
    if (!rank || (!isGoneFromGang(rank.state) && rank.running)) continue;
    const atMs = rank.endedAtMs ?? Number.NEGATIVE_INFINITY;
    if (atMs > endedAtMs || (first && first.atMs <= atMs)) continue;
    const when = rank.endedAtMs !== undefined ? ` at ${new Date(rank.endedAtMs).toISOString()}` : '';
    const reason = `${who} went first: ${rank.state}${when}${rank.error ? ` (${rank.error})` : ''}`;
    first = { fault: fault(reason, rank.endedAtMs ?? endedAtMs), atMs };
  }
  return first?.fault ?? unreachable;
}
