import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { assertTrustedDirectory, defaultTrustedUids } from '../lib/files/check-directory-trust.js';
import { configError } from '../lib/errors.js';
import { StoreLayout } from './store-layout.js';

const GROUP_OR_OTHER_WRITE = 0o022;

/**
 * Refuses a model store that anyone but the agent's account could steer
 * (security review 3, S1). The agent works in the store as root: it
 * truncates, writes, renames, links and deletes there by path. When the
 * engine account owned the store (the README's advice until then), it
 * planted links that made root create a cron file, truncate /etc/shadow,
 * write its pid over a root file and delete passwd at the next start, and it
 * rewrote a model's weights the store still called complete. Owned by root
 * and writable by no one else, the tree holds only what root made: no link
 * root did not make, no blob changed after its verification.
 *
 * So `cache_dir`, its parents and the links on the way (assertTrustedDirectory;
 * with `createMode`, the agent's start, a missing `cache_dir` is made by
 * the agent then) and every entry
 * below it must be owned by root (or the agent's own user, when it is not
 * root) and not writable by group or others. The one exception is what
 * engines must write, their compile caches: a leaf `compile/<uid>/<engine>/
 * <model>` may be, and should be, owned by `<uid>`; it is not looked into,
 * and everything above it is root's. A walk of the store's folders and
 * entries, lstat only (nothing followed): a few milliseconds for thousands
 * of files, at the agent's start and each `llmgw models` command.
 */
export function assertTrustedStore(cacheDir: string, trustedUids: ReadonlySet<number> = defaultTrustedUids(), createMode?: number): void {
  assertTrustedDirectory(cacheDir, 'models.cache_dir', trustedUids, createMode);
  const layout = new StoreLayout(cacheDir);
  const problem = (path: string, why: string) =>
    configError(
      `models.cache_dir: ${path} ${why}; the engine account could steer root's writes there (docs/store.md, "Who owns the model store"): ` +
        `sudo chown -R root:root ${layout.hubDir} ${layout.ownDir} && sudo chmod -R go-w ${cacheDir}` +
        `${path.startsWith(`${layout.engineCachesDir}/`) ? `, and remove a compile cache shared by every engine: sudo rm -rf ${layout.engineCachesDir}` : ''}`,
    );
  const check = (path: string, depthInCompile: number | undefined): void => {
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(path);
    } catch {
      return; // removed meanwhile: nothing to trust
    }
    const leaf = depthInCompile === 3;
    if (leaf) {
      // An engine's own cache: a real folder of the account its path names.
      const uid = Number(path.split('/').at(-3));
      if (!st.isDirectory()) throw problem(path, 'is not a folder');
      if (st.uid !== uid && !trustedUids.has(st.uid)) throw problem(path, `is owned by uid ${st.uid}, not ${uid} whose compile cache it is`);
      return;
    }
    if (!trustedUids.has(st.uid)) throw problem(path, `is owned by uid ${st.uid}`);
    if (st.isSymbolicLink()) {
      if (depthInCompile !== undefined) throw problem(path, 'is a symbolic link');
      return;
    }
    if ((st.mode & GROUP_OR_OTHER_WRITE) !== 0) throw problem(path, `is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`);
    if (!st.isDirectory()) return;
    if (depthInCompile === 0 || depthInCompile === 1) {
      // compile/<uid>/<engine>: names the layout gives.
      for (const name of readdirSync(path)) {
        if (depthInCompile === 0 && !/^\d+$/.test(name)) throw problem(join(path, name), 'is not a compile cache of this llmgw (compile/<uid>/<engine>/<model>)');
        check(join(path, name), depthInCompile + 1);
      }
      return;
    }
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      check(child, depthInCompile !== undefined ? depthInCompile + 1 : child === layout.engineCachesDir ? 0 : undefined);
    }
  };
  for (const name of safeReaddir(cacheDir)) {
    const child = join(cacheDir, name);
    check(child, child === layout.engineCachesDir ? 0 : undefined);
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
