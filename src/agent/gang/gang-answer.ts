import { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { cutString } from '../../lib/cut-string.js';
import { isValidShardId } from '../../lib/shard-id.js';
import { stateName } from '../../lib/shard-states.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/** One rank of a gang as its node's agent tells a peer (GET /v1/gangs/<id>). */
export interface GangRankAnswer {
  rank: number;
  shard: string;
  /** ShardState's name without its prefix: READY, FAILED, ... */
  state: string;
  /** Its engine may still run (ShardSnapshot.running). */
  running: boolean;
  /** UNHEALTHY because its own progress counters stalled (stall-detector.ts). */
  stalled: boolean;
  /** Why, as its status says: at most MAX_ANSWER_ERROR_CHARS. */
  error: string;
  /**
   * When its engine was seen gone, ms since the epoch on the answering node's
   * clock (issue 47); absent while it may run, and from agents older than
   * this field. A rank whose own engine ended compares it with its own end
   * to name the rank that went first (first-to-go.ts).
   */
  endedAtMs?: number;
}

/** What a peer's agent answers about one gang: its node and the ranks of the gang it supervises (none: not one). */
export interface GangAnswer {
  node: string;
  ranks: GangRankAnswer[];
}

/** The longest error an answer carries: a line, not a log. */
export const MAX_ANSWER_ERROR_CHARS = 512;
/** The largest answer a watcher reads: a node runs at most a few ranks of one gang. */
export const MAX_ANSWER_BYTES = 64 * 1024;

/** The answer about gang `gangId` from this node's shards. */
export function gangAnswer(nodeId: string, gangId: string, shards: readonly ShardSnapshot[]): GangAnswer {
  const ranks = shards
    .filter((s) => s.spec.gang?.gangId === gangId)
    .map((s) => ({
      rank: s.spec.rank,
      shard: s.shardId,
      state: stateName(s.state),
      running: s.running,
      stalled: s.stalled === true,
      error: cutString(s.error, MAX_ANSWER_ERROR_CHARS),
      ...(s.endedAtMs !== undefined ? { endedAtMs: s.endedAtMs } : {}),
    }));
  return { node: nodeId, ranks };
}

const STATES = new Set(Object.keys(ShardState).filter((k) => Number.isNaN(Number(k))));

/** A peer's answer read back, every field checked; a one-line reason when it is not one. */
export function parseGangAnswer(text: string): GangAnswer | string {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return 'the answer is not JSON';
  }
  const o = raw as Partial<GangAnswer>;
  if (typeof o !== 'object' || o === null || typeof o.node !== 'string' || !Array.isArray(o.ranks)) return 'the answer is not a gang answer';
  const ranks: GangRankAnswer[] = [];
  for (const r of o.ranks as Partial<GangRankAnswer>[]) {
    if (typeof r !== 'object' || r === null) return 'a rank of the answer is not an object';
    const ok =
      Number.isInteger(r.rank) && isValidShardId(r.shard) && typeof r.state === 'string' && STATES.has(r.state) &&
      typeof r.running === 'boolean' && typeof r.stalled === 'boolean' && typeof r.error === 'string';
    if (!ok) return 'a rank of the answer lacks rank, shard, state, running, stalled or error';
    if (r.endedAtMs !== undefined && !(Number.isSafeInteger(r.endedAtMs) && (r.endedAtMs as number) >= 0)) return 'a rank of the answer has an endedAtMs that is not a time';
    const ended = r.endedAtMs !== undefined ? { endedAtMs: r.endedAtMs as number } : {};
    ranks.push({ rank: r.rank as number, shard: r.shard as string, state: r.state as string, running: r.running as boolean, stalled: r.stalled as boolean, error: cutString(r.error as string, MAX_ANSWER_ERROR_CHARS), ...ended });
  }
  return { node: cutString(o.node, 256), ranks };
}
