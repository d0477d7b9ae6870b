import { repoIdProblem } from './repo-id.js';
import { isModelComplete } from './scan-store.js';
import { StoreLayout } from './store-layout.js';

/**
 * Whether a shard's model (profile.model, at the profile's --revision, main
 * when it gives none) is complete in the store. A local path or anything
 * that is not a hub id is never "complete": the engine then starts as it
 * would without a store, online.
 */
export async function shardModelComplete(cacheDir: string, model: string, args: readonly string[]): Promise<boolean> {
  if (repoIdProblem(model) !== undefined) return false;
  return isModelComplete(new StoreLayout(cacheDir), model, revisionOf(args));
}

/** The value of --revision in an engine's args (`--revision x` or `--revision=x`); main when absent. */
export function revisionOf(args: readonly string[]): string {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === '--revision') return args[i + 1] ?? 'main';
    if (a.startsWith('--revision=')) return a.slice('--revision='.length);
  }
  return 'main';
}
