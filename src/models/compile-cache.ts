import type { CompileDirs } from './engine-cache-survey.js';
import { EngineCacheWatch } from './engine-cache-watch.js';
import type { StoreLayout } from './store-layout.js';

/**
 * Whether the node's store holds a compile cache for `engine` and `model`
 * (issue 41's "complete on local disk with a compile cache"): a file in one
 * of its compile directories (`compileDirs`, from its wing), under any
 * engine account's cache. A start with one skips the compile, which is most
 * of a warm start's time (ModelExpress: weights alone 1.1x, weights and JIT
 * caches 4.6x). It says a cache exists, not that it matches this start's
 * engine version and GPU: the times learned from it say what it is worth.
 *
 * Answered from the last bounded survey (EngineCacheWatch), never by
 * reading the accounts' folders where it is asked (security review 4, F2).
 */
export async function hasCompileCache(layout: StoreLayout, engine: string, model: string, compileDirs: CompileDirs): Promise<boolean> {
  const watch = new EngineCacheWatch(layout, { compileDirs });
  await watch.refresh();
  return watch.compiled(model, engine);
}

