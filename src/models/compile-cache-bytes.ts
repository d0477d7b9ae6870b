import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { StoreLayout } from './store-layout.js';

/**
 * Bytes the engines' compile caches hold under `<cache_dir>/compile`
 * (engine-cache-env.ts: vLLM's, SGLang's, torch inductor's, Triton's, one
 * folder per account, engine and model). They count against models.budget,
 * so that the budget is what the store holds on disk; a model's are removed
 * with it (removeCompileCaches).
 * Files only, symbolic links not followed; what vanishes during the walk
 * (an engine replacing an entry) counts as nothing.
 */
export async function compileCacheBytes(layout: StoreLayout): Promise<number> {
  let total = 0;
  const dirs = [layout.engineCachesDir];
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      const path = join(dir, e.name);
      if (e.isDirectory()) dirs.push(path);
      else if (e.isFile()) total += (await lstat(path).catch(() => undefined))?.size ?? 0;
    }
  }
  return total;
}
