import { create } from '@bufbuild/protobuf';
import { type TimeToReady, TimeToReadySchema } from '../gen/llmgw/v1/agent_pb.js';
import { formatBytes } from '../lib/format-bytes.js';

/*
 * Times to READY for rungs this node never started a model from, modelled
 * from a rung it did and a rate it measured (issue 41, item 2): never a
 * guess, always said how (TimeToReady.basis), and only where the one rung
 * differs from the other by bytes read at that rate.
 */

/** A transfer this node timed: its last pull from the hub, or its last warm read from disk. */
export interface MeasuredRate {
  bytes: number;
  ms: number;
  atMs: number;
}

export interface NodeRates {
  /** The last pull's bytes fetched from the hub and how long it took. */
  hub?: MeasuredRate;
  /** The last warm of a model that was not in the page cache: bytes read from disk and how long. */
  disk?: MeasuredRate;
  /** The store's disk probed for durable writes (disk-write-probe.ts): bytes written and synced, and how long. */
  diskWrite?: MeasuredRate;
}

/** Below this a transfer says more about latency than about rate: not learned from. */
export const MIN_RATE_BYTES = 8 * 1024 * 1024;

const perSecond = (r: MeasuredRate) => (r.bytes * 1000) / r.ms;

/**
 * What each rung never measured would take, for a model of `bytes`:
 * - hub, from the store's time and the bytes at the hub's rate (a start from
 *   the hub downloads the model, then loads it as a start from disk does);
 * - store (and store+compile), from the page cache's time (and
 *   page-cache+compile's) and the bytes at the disk's rate.
 * Nothing where the rung it comes from, the rate, or the size is unknown.
 */
export function modelledTimes(learned: readonly TimeToReady[], bytes: number, rates: NodeRates): TimeToReady[] {
  if (bytes <= 0) return [];
  const measured = new Map(learned.filter((t) => t.samples > 0).map((t) => [t.from, t.medianSeconds]));
  const out: TimeToReady[] = [];
  const model = (from: string, base: string, rate: MeasuredRate | undefined, where: string) => {
    const t = measured.get(base);
    if (measured.has(from) || t === undefined || !rate) return;
    const seconds = t + bytes / perSecond(rate);
    const basis = `${base} ${t.toFixed(1)}s + ${formatBytes(bytes)} at ${formatBytes(perSecond(rate))}/s ${where}`;
    out.push(create(TimeToReadySchema, { from, medianSeconds: seconds, samples: 0, basis }));
  };
  model('hub', 'store', rates.hub, 'from the hub (its last pull)');
  model('store', 'page-cache', rates.disk, 'from disk (its last warm)');
  model('store+compile', 'page-cache+compile', rates.disk, 'from disk (its last warm)');
  return out;
}
