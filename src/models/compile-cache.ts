import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { StoreLayout } from './store-layout.js';

/**
 * Where an engine keeps what it compiled, under its cache for a model
 * (engineCacheEnv): vLLM's torch.compile graphs (VLLM_CACHE_ROOT/torch_compile_cache,
 * V:vllm/compilation/backends.py), and torch's Inductor and Triton kernels.
 */
const COMPILE_DIRS = ['vllm/torch_compile_cache', 'torchinductor', 'triton'] as const;
/** Entries looked at, at most, before the answer is no: a cache is a few hundred files, a walk must stay cheap. */
const MAX_ENTRIES = 10_000;

/**
 * Whether the node's store holds a compile cache for `engine` and `model`
 * (issue 41's "complete on local disk with a compile cache"): a file in one
 * of its compile directories, under any engine account's cache. A start
 * with one skips the compile, which is most of a warm start's time
 * (ModelExpress: weights alone 1.1x, weights and JIT caches 4.6x). It says
 * a cache exists, not that it matches this start's engine version and GPU:
 * the times learned from it say what it is worth.
 */
export function hasCompileCache(layout: StoreLayout, engine: string, model: string): boolean {
  let uids: string[];
  try {
    uids = readdirSync(layout.engineCachesDir);
  } catch {
    return false;
  }
  let budget = MAX_ENTRIES;
  const anyFile = (dir: string, depth: number): boolean => {
    let entries: import('node:fs').Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return false;
    }
    for (const e of entries) {
      if (--budget <= 0) return false;
      if (e.isFile()) return true;
      if (e.isDirectory() && depth < 8 && anyFile(join(dir, e.name), depth + 1)) return true;
    }
    return false;
  };
  return uids.filter((u) => /^\d+$/.test(u)).some((uid) => COMPILE_DIRS.some((sub) => anyFile(join(layout.engineCacheDir(Number(uid), engine, model), sub), 0)));
}

/** hasCompileCache for the store at `cacheDir` (models.cache_dir); none without a store. */
export function compiledIn(cacheDir: string): ((model: string, engine: string) => boolean) | undefined {
  if (cacheDir === '') return undefined;
  const layout = new StoreLayout(cacheDir);
  return (model, engine) => hasCompileCache(layout, engine, model);
}
