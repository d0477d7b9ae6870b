import { setImmediate as yieldToLoop } from 'node:timers/promises';

/**
 * Time one slice of the filter may hold the event loop before it yields;
 * the agent's heartbeats, `ctl` and /metrics answer between slices.
 */
export const FILTER_SLICE_MS = 10;

/**
 * `items.filter(keep)`, yielding to the event loop every FILTER_SLICE_MS.
 * Include patterns match in linear time, but the bounds a control plane
 * may send (64 patterns of 256 characters) against a hub's listing of
 * thousands of names held the loop 1.6 s in one run (security review 4,
 * S3; 5.9 s on a loaded machine), tens of seconds for a 16 MiB listing:
 * a heartbeat late by that much reads as a dead node. The work is the
 * same; the loop is never held by it for more than a slice.
 */
export async function filterYielding<T>(items: readonly T[], keep: (item: T) => boolean, signal?: AbortSignal): Promise<T[]> {
  const out: T[] = [];
  let sliceStart = performance.now();
  for (const item of items) {
    if (keep(item)) out.push(item);
    if (performance.now() - sliceStart >= FILTER_SLICE_MS) {
      await yieldToLoop(undefined, signal ? { signal } : undefined);
      sliceStart = performance.now();
    }
  }
  return out;
}
