import type { ShardId } from '../../lib/shard-id.js';
import { create } from '@bufbuild/protobuf';
import { setTimeout as sleep } from 'node:timers/promises';
import { type DrainProgress, DrainProgressSchema, type DrainResponse, DrainResponseSchema } from '../../gen/llmgw/v1/admin_pb.js';
import { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { AdminBackend } from './admin-backend.js';

/** How often in-flight counts are read while a drain is waited for. */
export const DRAIN_POLL_MS = 500;
/** How long `ctl drain --wait` waits when the request names no timeout: `--timeout`'s default. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 5 * 60_000;

export interface DrainProgressOptions {
  /** Shards already marked DRAINING. */
  shardIds: readonly ShardId[];
  wait: boolean;
  timeoutMs: number;
  signal: AbortSignal;
  pollMs?: number;
}

/**
 * In-flight counts of draining shards: one message without wait; with wait,
 * one per poll until every shard is at zero (`drained`) or the timeout
 * passes (`timedOut`), each on the last message.
 *
 * A shard whose process is gone has nothing in flight. A shard that serves
 * no HTTP (a worker rank) has no count to read and does not hold the drain
 * up: its leader carries the traffic. A count that cannot be read from a
 * shard that serves HTTP is -1 and keeps the wait going, since "unknown" is
 * not "zero" and stopping a shard on a guess would cut requests off.
 */
export async function* streamDrainProgress(backend: AdminBackend, opts: DrainProgressOptions): AsyncGenerator<DrainResponse> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    const shards = await Promise.all(opts.shardIds.map((id) => progressOf(backend, id)));
    const drained = shards.every((s) => !s.countable || s.inFlight === 0);
    const timedOut = opts.wait && !drained && Date.now() >= deadline;
    const last = !opts.wait || drained || timedOut;
    yield create(DrainResponseSchema, { shards, drained: last && drained, timedOut });
    if (last || opts.signal.aborted) return;
    try {
      await sleep(Math.min(opts.pollMs ?? DRAIN_POLL_MS, Math.max(0, deadline - Date.now())), undefined, { signal: opts.signal });
    } catch {
      return; // the client went away or the agent is stopping; the shards stay DRAINING
    }
  }
}

async function progressOf(backend: AdminBackend, id: ShardId): Promise<DrainProgress> {
  const shard = backend.shard(id);
  if (!shard || isTerminal(shard.state)) {
    return create(DrainProgressSchema, { shardId: id, state: shard?.state ?? ShardState.STOPPED, inFlight: 0, countable: true });
  }
  if (!shard.servesHttp) {
    return create(DrainProgressSchema, { shardId: id, state: shard.state, inFlight: -1, countable: false });
  }
  const n = await backend.inFlight(id).catch(() => undefined);
  return create(DrainProgressSchema, { shardId: id, state: shard.state, inFlight: n ?? -1, countable: true });
}
