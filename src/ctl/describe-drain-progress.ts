import type { DrainProgress } from '../gen/llmgw/v1/admin_pb.js';
import { stateName } from '../lib/shard-states.js';

/** Whether a shard no longer holds a drain up: nothing in flight, or no count to wait for (a worker rank). */
export function isDrainDone(p: DrainProgress): boolean {
  return !p.countable || p.inFlight === 0;
}

/** "3 in flight", as the drain progress and summary show a shard. */
export function describeDrainProgress(p: DrainProgress): string {
  const state = stateName(p.state);
  if (!p.countable) return `${state}, no in-flight count (serves no HTTP; its leader carries the traffic)`;
  if (p.inFlight < 0) return `${state}, in-flight count unreadable (the engine's /metrics did not answer)`;
  return `${state}, ${p.inFlight} in flight`;
}
