import type { Logger } from '../../lib/logger.js';
import { formatBytes } from '../../lib/format-bytes.js';
import { ENGINE_CACHE_SHARE, type EngineCacheSurvey, engineCachesOverBound } from '../../models/engine-cache-survey.js';

/**
 * Says in the log when the engines' caches go over their bound (their share
 * of models.budget, or more entries than a survey reads) and when they are
 * back under it, once each: what is over is not counted against the budget
 * and evicts no model (security review 4, F4), but the operator should know
 * an account fills its folder.
 */
export class EngineCacheBound {
  #over = false;

  constructor(private readonly log: Logger) {}

  judge(s: EngineCacheSurvey, budget: number): void {
    const over = engineCachesOverBound(s, budget);
    if (over === this.#over) return;
    this.#over = over;
    if (!over) {
      this.log.info({ bytes: s.bytes }, "the engines' caches are back within their share of models.budget");
      return;
    }
    const largest = [...s.leaves].sort((a, b) => Number(b.capped) - Number(a.capped) || b.bytes - a.bytes || b.entries - a.entries).slice(0, 3);
    this.log.warn(
      {
        bytes: s.bytes,
        entries: s.entries,
        links: s.links,
        capped: s.capped,
        largest: largest.map((l) => ({ uid: l.uid, engine: l.engine, model: l.leaf, bytes: l.bytes, entries: l.entries, capped: l.capped })),
      },
      `the engines' caches are over their bound (${s.capped ? 'more entries than a survey reads' : `${formatBytes(s.bytes)} on disk`}; ${ENGINE_CACHE_SHARE * 100}% of models.budget, ${formatBytes(Math.floor(budget * ENGINE_CACHE_SHARE))}): they count as that share and evict no model beyond it; look at the account's folder named here`,
    );
  }
}
