import { lstat, readdir, rename, rm } from 'node:fs/promises';
import { execa } from 'execa';
import { join } from 'node:path';
import { failure } from '../lib/errors.js';
import { modelPins } from './model-pins.js';
import { tryLockModel } from './model-lock.js';
import { repoFolderName } from './repo-id.js';
import { type StoreLayout, modelCacheKey } from './store-layout.js';

export type RemoveOutcome = { removed: true } | { removed: false; reason: string; absent?: true };

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
      // No folder: a record alone (a pull that never fetched) goes; nothing at all is not "removed" (walkthrough 3).
      const recorded = await lstat(layout.manifestPath(repo)).then(() => true, () => false);
      await rm(layout.manifestPath(repo), { force: true });
      return recorded ? { removed: true } : { removed: false, reason: 'it is not in the store', absent: true };
    }
    const late = await modelPins(layout, repo);
    if (late.length > 0) {
      await rename(aside, layout.repoDir(repo));
      return { removed: false, reason: `pinned by ${late.join(', ')}` };
    }
    await rm(layout.manifestPath(repo), { force: true });
    await rm(aside, { recursive: true, force: true });
    await removeCompileCaches(layout, repo);
    return { removed: true };
  } finally {
    lock.release();
  }
}

/** removeModel for `models rm`: a refusal is an error naming why. */
export async function removeModelOrFail(layout: StoreLayout, repo: string): Promise<void> {
  const r = await removeModel(layout, repo);
  if (!r.removed && r.absent) throw failure(`${repo} is not in the model store; \`llmgw models list\` shows what is`);
  if (!r.removed) throw failure(`${repo} is not removed: ${r.reason}; try again once it is not in use`);
}

/**
 * Deletes every engine's compile cache of `repo` (StoreLayout.engineCacheDir):
 * each leaf is renamed aside in its engine's folder, which is the agent's,
 * and then deleted as the account that owns it, so that the kernel judges
 * every path in a tree that account could have filled with links (the
 * rm -rf race of CVE-2022-21658). Best effort: what is left is counted in
 * the budget and removed by the next eviction of the model.
 */
export async function removeCompileCaches(layout: StoreLayout, repo: string): Promise<void> {
  const leafName = modelCacheKey(repo);
  for (const uid of await readdir(layout.engineCachesDir).catch(() => [] as string[])) {
    const uidDir = join(layout.engineCachesDir, uid);
    for (const engine of await readdir(uidDir).catch(() => [] as string[])) {
      const leaf = join(uidDir, engine, leafName);
      const aside = join(uidDir, engine, `.trash-${leafName}-${process.pid}`);
      try {
        await rename(leaf, aside);
      } catch {
        continue;
      }
      await removeAsOwner(aside).catch(() => {});
    }
  }
}

/** rm -rf of `dir` as its owner when the agent is root and the owner is not: the kernel then refuses whatever that account could not delete itself. */
async function removeAsOwner(dir: string): Promise<void> {
  const st = await lstat(dir);
  if (!st.isDirectory()) return rm(dir, { force: true });
  if ((process.geteuid?.() ?? 0) !== 0 || st.uid === 0) return rm(dir, { recursive: true, force: true });
  await execa('rm', ['-rf', '--one-file-system', '--', dir], { uid: st.uid, gid: st.gid, reject: true, stdin: 'ignore' });
}
