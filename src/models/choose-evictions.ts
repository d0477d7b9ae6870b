import type { StoredModel } from './scan-store.js';

export interface EvictionPlan {
  /** Least recently used first. */
  evict: StoredModel[];
  /** Whether the store fits the budget once they are gone. */
  fits: boolean;
  /** Bytes the store would hold after the evictions and the new bytes. */
  bytesAfter: number;
}

/**
 * Which models to evict so that `needBytes` more fit in `budget`: least
 * recently used first, never a pinned model (a live shard reads it), never
 * one being pulled, never `keep` (the model the bytes are for). Decided
 * apart from acting, so the rule is tested without a disk.
 */
export function chooseEvictions(models: readonly StoredModel[], needBytes: number, budget: number, keep: string): EvictionPlan {
  let bytesAfter = models.reduce((sum, m) => sum + m.bytes, 0) + needBytes;
  const evict: StoredModel[] = [];
  const candidates = models
    .filter((m) => m.repo !== keep && m.pins.length === 0 && !m.pulling)
    .sort((a, b) => a.lastUsedMs - b.lastUsedMs || a.repo.localeCompare(b.repo));
  for (const m of candidates) {
    if (bytesAfter <= budget) break;
    evict.push(m);
    bytesAfter -= m.bytes;
  }
  return { evict, fits: bytesAfter <= budget, bytesAfter };
}
