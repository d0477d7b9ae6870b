import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { failure } from '../lib/errors.js';
import { modelPins } from './model-pins.js';
import { tryLockModel } from './model-lock.js';
import { repoFolderName } from './repo-id.js';
import type { StoreLayout } from './store-layout.js';

export type RemoveOutcome = { removed: true } | { removed: false; reason: string };

/**
 * Deletes a model from the store unless a shard pins it or a pull holds it.
 * The folder is first renamed out of the hub cache, in one step an engine
 * never sees half of, and the pins are read again after: a shard that
 * pinned the model in between gets it back whole.
 */
export async function removeModel(layout: StoreLayout, repo: string): Promise<RemoveOutcome> {
  const lock = await tryLockModel(layout, repo);
  if (!lock) return { removed: false, reason: 'a pull of it is in progress' };
  try {
    const pins = await modelPins(layout, repo);
    if (pins.length > 0) return { removed: false, reason: `pinned by ${pins.join(', ')}` };
    const aside = join(layout.hubDir, `.removing-${repoFolderName(repo)}-${process.pid}`);
    try {
      await rename(layout.repoDir(repo), aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await rm(layout.manifestPath(repo), { force: true });
      return { removed: true };
    }
    const late = await modelPins(layout, repo);
    if (late.length > 0) {
      await rename(aside, layout.repoDir(repo));
      return { removed: false, reason: `pinned by ${late.join(', ')}` };
    }
    await rm(layout.manifestPath(repo), { force: true });
    await rm(aside, { recursive: true, force: true });
    return { removed: true };
  } finally {
    lock.release();
  }
}

/** removeModel for `models rm`: a refusal is an error naming why. */
export async function removeModelOrFail(layout: StoreLayout, repo: string): Promise<void> {
  const r = await removeModel(layout, repo);
  if (!r.removed) throw failure(`${repo} is not removed: ${r.reason}; try again once it is not in use`);
}
