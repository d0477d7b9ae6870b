import { durationFromMs } from '@bufbuild/protobuf/wkt';
import type { DrainResponse } from '../gen/llmgw/v1/admin_pb.js';
import { failure, usageError } from '../lib/errors.js';
import { parseShardId } from '../lib/shard-id.js';
import { openAdminClient } from './open-admin-client.js';
import { type DrainRenderer, runDrainTasks } from './run-drain-tasks.js';

/** Past the drain's own timeout, how long the client waits for the agent to say so. */
const CLIENT_DEADLINE_SLACK_MS = 30_000;

export interface CtlDrainOptions {
  socket: string;
  /** One shard, or all. */
  shardId?: string;
  all: boolean;
  wait: boolean;
  /** Undo the drain (DRAINING → READY) instead; not with wait. */
  cancel?: boolean;
  timeoutMs: number;
  signal: AbortSignal;
  /** How progress is shown while waiting; none with 'silent' (--json). */
  renderer: DrainRenderer | 'silent';
}

/**
 * Marks one shard, or every serving one, DRAINING (the agent reports it to
 * the control plane, which routes elsewhere); with `cancel`, the named
 * DRAINING shard (or every one) becomes READY again instead. With `wait`,
 * follows the in-flight counts to zero. Returns the agent's last message: `drained`
 * when every shard reached zero, `timedOut` when the timeout passed first.
 */
export async function ctlDrain(o: CtlDrainOptions): Promise<DrainResponse> {
  if (o.all === (o.shardId !== undefined)) throw usageError('name one shard or give --all, not both and not neither');
  if (o.shardId !== undefined) parseShardId(o.shardId);
  if (o.cancel && o.wait) throw usageError('--cancel and --wait do not go together: a cancelled drain has nothing to wait for');
  const admin = await openAdminClient(o.socket);
  try {
    const stream = admin.client
      .drain(
        {
          shardId: o.shardId ?? '',
          all: o.all,
          wait: o.wait,
          cancel: o.cancel ?? false,
          timeout: durationFromMs(o.timeoutMs),
        },
        { signal: o.signal, timeoutMs: o.wait ? o.timeoutMs + CLIENT_DEADLINE_SLACK_MS : CLIENT_DEADLINE_SLACK_MS },
      )
      [Symbol.asyncIterator]();
    // The first answer carries the refusals (an unknown shard, one still
    // STARTING) before anything is shown.
    const first = await stream.next();
    if (first.done) throw failure('the agent ended the drain without an answer');
    let latest = first.value;
    const listeners = new Set<() => void>();
    const ended = (async () => {
      for (let n = await stream.next(); !n.done; n = await stream.next()) {
        latest = n.value;
        for (const l of [...listeners]) l();
      }
    })();
    // Handled here as well as below, so a failure while listr runs is not unhandled.
    ended.catch(() => {});
    if (o.wait && o.renderer !== 'silent' && latest.shards.length > 0) {
      await runDrainTasks(
        {
          latest: () => latest,
          subscribe: (l) => {
            listeners.add(l);
            return () => listeners.delete(l);
          },
          ended,
        },
        o.renderer,
      );
    }
    await ended;
    return latest;
  } catch (err) {
    throw admin.explain(err);
  } finally {
    admin.close();
  }
}
