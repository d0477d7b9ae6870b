import type { DrainResponse } from '../gen/llmgw/v1/admin_pb.js';
import { stateName } from '../lib/shard-states.js';
import { formatDuration } from '../lib/duration.js';
import { describeDrainProgress, isDrainDone } from './describe-drain-progress.js';

/**
 * What `ctl drain` prints when the agent's last message is in: one line per
 * shard, or, when the timeout passed, the error naming what is left.
 */
export function renderDrainSummary(last: DrainResponse, o: { wait: boolean; timeoutMs: number; cancel?: boolean }): { text: string; error?: string } {
  if (o.cancel) {
    if (last.shards.length === 0) return { text: 'no DRAINING shards to cancel the drain of' };
    const cancelled = last.shards.map((p) => `${p.shardId}: ${stateName(p.state)}`);
    return { text: `${cancelled.join('\n')}\ndrain cancelled: the control plane may route requests here again` };
  }
  if (last.shards.length === 0) return { text: 'no READY or UNHEALTHY shards to drain' };
  const lines = last.shards.map((p) => `${p.shardId}: ${describeDrainProgress(p)}`);
  if (last.timedOut) {
    const left = last.shards.filter((p) => !isDrainDone(p));
    const what = left.map((p) => `${p.shardId} has ${p.inFlight < 0 ? 'an unknown number of' : p.inFlight} requests in flight`).join(', ');
    return { text: lines.join('\n'), error: `timed out after ${formatDuration(o.timeoutMs)}: ${what}; the shards stay DRAINING` };
  }
  if (o.wait && last.drained) return { text: `drained\n${lines.join('\n')}` };
  return { text: `${lines.join('\n')}\nDRAINING: the control plane routes new requests elsewhere; --wait waits for the rest to finish` };
}
