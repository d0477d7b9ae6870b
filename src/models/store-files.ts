import { constants } from 'node:fs';
import { type FileHandle, lstat, mkdir, open } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { isNotFound } from '../lib/errno.js';
import { defaultTrustedUids, makeTrustedDirectory } from '../lib/files/check-directory-trust.js';
import { failure } from '../lib/errors.js';
import type { StoreLayout } from './store-layout.js';

/*
 * How the agent (root) makes folders and opens files in the model store:
 * never through a link (security review 4, F3). Node has no openat, so the
 * store's path is judged whole (assertTrustedStore's path walk: every folder
 * from / root's and written by no one else, every link on the way root's)
 * where each pull starts, each folder below cache_dir is lstat'ed as it is
 * made, and each file is opened O_NOFOLLOW and refused when it is not a
 * regular file. What is left is the race between a folder's lstat and the
 * open by path: only a writer of a folder on the path can swap a component
 * in between, and the walk has just found that every one is root's.
 */

const GROUP_OR_OTHER_WRITE = 0o022;

/** O_NOFOLLOW added to open(2)'s flags for each file of the store. */
export const READ = constants.O_RDONLY | constants.O_NOFOLLOW;
export const READ_WRITE = constants.O_RDWR | constants.O_NOFOLLOW;
export const CREATE_TRUNCATE = constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW;
export const WRITE_TRUNCATE = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW;
export const APPEND = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_NOFOLLOW;
/** READ for createReadStream, whose type says string while fs.open takes open(2)'s flags as a number too. */
export const READ_STREAM = READ as unknown as string;

/**
 * mkdir -p of `dir` inside the store, the agent's way: cache_dir judged as
 * a whole and made by the agent when missing, then each folder below it
 * made (0755) or found, lstat'ed: a real folder, the agent's, written by no
 * one else. A folder another user made, or a link in its place, is refused
 * with one line, never written into.
 */
export async function makeStoreDir(layout: StoreLayout, dir: string): Promise<void> {
  assertTrustedStorePath(layout.cacheDir);
  const rel = relative(layout.cacheDir, dir);
  if (rel.startsWith('..') || rel.startsWith(sep)) throw new Error(`${dir} is not inside the model store ${layout.cacheDir}`);
  const trusted = defaultTrustedUids();
  let cur = layout.cacheDir;
  for (const name of rel.split(sep).filter((p) => p !== '')) {
    cur = join(cur, name);
    await mkdir(cur, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    const st = await lstat(cur);
    const why = st.isSymbolicLink()
      ? 'is a symbolic link'
      : !st.isDirectory()
        ? 'is not a folder'
        : !trusted.has(st.uid)
          ? `is owned by uid ${st.uid}`
          : (st.mode & GROUP_OR_OTHER_WRITE) !== 0
            ? `is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`
            : undefined;
    if (why !== undefined) throw storeRefusal(cur, why);
  }
}

/** cache_dir and the folders and links on the way to it, judged whole at each pull and made when missing (not its entries: that is the start's walk). */
export function assertTrustedStorePath(cacheDir: string): void {
  makeTrustedDirectory(cacheDir, 'models.cache_dir', 0o755);
}

/**
 * Opens a file of the store with `flags` (one of the above, O_NOFOLLOW), and
 * refuses what is not a regular file: a link planted as a blob's
 * `.incomplete` into a root-only folder is never written through.
 */
export async function openStoreFile(path: string, flags: number, mode = 0o600): Promise<FileHandle> {
  let fh: FileHandle;
  try {
    fh = await open(path, flags | constants.O_NONBLOCK, mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw storeRefusal(path, 'is a symbolic link');
    throw err;
  }
  const st = await fh.stat().catch(async (err: unknown) => {
    await fh.close();
    throw err;
  });
  if (!st.isFile()) {
    await fh.close();
    throw storeRefusal(path, 'is not a regular file');
  }
  return fh;
}

/** The size of a store file, 0 when it is missing; what is not a regular file (a link) is refused. */
export async function storeFileSize(path: string): Promise<number> {
  let st: Awaited<ReturnType<typeof lstat>>;
  try {
    st = await lstat(path);
  } catch (err) {
    if (isNotFound(err)) return 0;
    throw err;
  }
  if (!st.isFile()) throw storeRefusal(path, st.isSymbolicLink() ? 'is a symbolic link' : 'is not a regular file');
  return st.size;
}

/** truncate(2) of a store file without following a link. */
export async function truncateStoreFile(path: string, length: number): Promise<void> {
  const fh = await openStoreFile(path, READ_WRITE);
  try {
    await fh.truncate(length);
  } finally {
    await fh.close();
  }
}

/** chmod(2) of a store file without following a link. */
export async function chmodStoreFile(path: string, mode: number): Promise<void> {
  const fh = await openStoreFile(path, READ);
  try {
    await fh.chmod(mode);
  } finally {
    await fh.close();
  }
}

function storeRefusal(path: string, why: string): Error {
  return failure(`models.cache_dir: ${path} ${why}; refused, the store holds only what root made (security review 4, F3): remove it (sudo rm -rf ${path}) and pull again`);
}
