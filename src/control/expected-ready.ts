import type { ModelWarmth } from '../gen/llmgw/v1/agent_pb.js';

/** What a node expects of a start: seconds to READY and where from, as its agent measured (Inventory.warmth). */
export interface ExpectedReady {
  seconds: number;
  from: string;
  /** Modelled, not measured (TimeToReady.basis): how. */
  basis?: string;
}

/**
 * The time to READY a node's agent measured for this model, engine and
 * profile from the rung the node offers now (issue 41): its store's time
 * when the model is complete there (or is served or asleep there, so on its
 * disk), the hub's when it is partial or absent; undefined when the node
 * measured none from that rung. Never a guess.
 */
export function expectedReady(profile: { name: string; engine: string; model: string }, warmth: readonly ModelWarmth[] | undefined): ExpectedReady | undefined {
  const w = warmth?.find((x) => x.model === profile.model && x.engine === profile.engine && x.profile === profile.name);
  if (!w) return undefined;
  // From the rung itself down to slower ones the node measured: a slower rung's time overestimates, never flatters.
  const onDisk = ['page-cache+compile', 'page-cache', 'store+compile', 'store', 'unmanaged', 'hub'];
  const order: Record<string, readonly string[]> = {
    serving: onDisk,
    sleeping: onDisk,
    'page-cache+compile': ['page-cache+compile', 'page-cache', 'store+compile', 'store'],
    'page-cache': ['page-cache', 'store'],
    'store+compile': ['store+compile', 'store'],
    store: ['store'],
    partial: ['hub'],
    absent: ['hub'],
    unmanaged: ['unmanaged'],
  };
  const rungs = order[w.rung] ?? [];
  for (const from of rungs) {
    const t = w.learned.find((l) => l.from === from);
    if (t && t.samples > 0) return { seconds: t.medianSeconds, from };
  }
  // Nothing measured from there: the node's modelled figure for its own rung, said as such.
  const modelled = w.learned.find((l) => l.from === rungs[0] && l.samples === 0 && l.basis !== '');
  return modelled ? { seconds: modelled.medianSeconds, from: modelled.from, basis: modelled.basis } : undefined;
}

/** "node-b: 6.0s from store" for the placement's log line. */
export function describeExpected(nodeId: string, e: ExpectedReady | undefined): string {
  if (!e) return `${nodeId}: not measured`;
  const s = e.seconds;
  return `${nodeId}: ${s < 1 ? `${Math.round(s * 1000)}ms` : s < 10 ? `${s.toFixed(1)}s` : `${Math.round(s)}s`} from ${e.from}${e.basis ? ` (modelled: ${e.basis})` : ''}`;
}
