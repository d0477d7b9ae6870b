/**
 * Time until a periodic tick's next slot on a grid all of one agent's ticks
 * share: the multiples of `intervalMs` on the process's monotonic clock.
 *
 * Why shared slots: an agent that launched its 64 engines one after another
 * started their health ticks at 64 moments spread over the interval, and
 * each probe then ran alone, woken out of an idle main thread, its code
 * and data cold: at 64 sim shards that agent spent 1.36-1.54x its floor
 * program's CPU, steady, against 0.9-1.1x for the same build after a
 * restart that adopted the same engines (whose ticks all start together,
 * as the floor's do). The work per probe is the same; only its spread in
 * time differed (bench/RESULTS.md, issue 52 items 3-4).
 *
 * Never less than half an interval: a tick placed just before a slot waits
 * for the next one, so two ticks of one shard are between half an interval
 * and one and a half apart, never back to back.
 */
export function msToNextSlot(intervalMs: number, nowMs: number): number {
  if (!(intervalMs > 0)) return 0;
  const delay = intervalMs - (nowMs % intervalMs);
  return delay < intervalMs / 2 ? delay + intervalMs : delay;
}
