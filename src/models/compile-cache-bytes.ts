import { countedEngineCacheBytes, type EngineCacheSurvey, surveyEngineCaches } from './engine-cache-survey.js';
import type { StoreLayout } from './store-layout.js';

/**
 * Bytes the engines' caches under `<cache_dir>/engines` count against
 * models.budget (`budget`): their allocated blocks (vLLM's, SGLang's, torch
 * inductor's and Triton's, one folder per account, engine and model), up to
 * their share of the budget (ENGINE_CACHE_SHARE), read by a bounded survey
 * that follows no link (engine-cache-survey.ts). A model's are removed with
 * it (removeCompileCaches). Before, apparent sizes were summed by an
 * unbounded walk: a 9 MiB sparse file taking no disk evicted every other
 * tenant's model, 15 TiB of them refused every pull (security review 4, F4).
 * `survey` reuses one already made.
 */
export async function compileCacheBytes(layout: StoreLayout, budget: number, survey?: EngineCacheSurvey): Promise<number> {
  return countedEngineCacheBytes(survey ?? (await surveyEngineCaches(layout)), budget);
}
