import type { Stats } from 'node:fs';
import { lstat, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isNotFound } from '../lib/errno.js';
import { FILE_CALLS_AT_ONCE, mapConcurrent } from '../lib/map-concurrent.js';
import { type ModelManifest, readManifest } from './model-manifest.js';
import { modelPins } from './model-pins.js';
import { tryLockModel } from './model-lock.js';
import { COMMIT_HASH, checkRevision, repoFromFolderName } from './repo-id.js';
import type { StoreLayout } from './store-layout.js';
import { checkedAdapterMeta } from './adapters/adapter-files.js';

/** One model of the store as `models list` shows it and eviction judges it. */
export interface StoredModel {
  repo: string;
  /** 'adapter' for a LoRA adapter (adapters/adapter-files.ts): stored, budgeted, pinned and evicted like a model. A scan always sets it; absent means a model. */
  kind?: 'model' | 'adapter';
  /** An adapter's base model (base_model_name_or_path) and rank (r), of its last pull; absent for a model, or before its config was read. */
  baseModel?: string;
  rank?: number;
  /** Revision → commit, as pulled. */
  refs: Record<string, string>;
  /** Commits whose every file is verified and linked. */
  completeCommits: string[];
  /** Every snapshot complete: what `models list` calls complete. A model the engines fetched themselves has no manifest and is not. */
  complete: boolean;
  /** Some snapshot was pulled with --include: its shards start online (offlineProblem); `models list` says subset. */
  subset: boolean;
  /** Bytes on disk: blobs and partial downloads. */
  bytes: number;
  /** Of which partial downloads (`.incomplete`), never counted as a complete file. */
  partialBytes: number;
  lastUsedMs: number;
  /** Shards pinning it; never evicted while any does. */
  pins: string[];
  /** Another pull holds its lock. */
  pulling: boolean;
}

async function dirEntries(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
}

/** A model folder's blobs as one readdir and an lstat each found them (links not followed; absent when gone meanwhile). */
export interface BlobListing {
  dir: string;
  entries: { name: string; path: string; stats: Stats | undefined }[];
}

/** The blobs of a model folder, listed once: what blobBytes, a warm's files and its completeness are all judged from. */
export async function listBlobs(repoDir: string): Promise<BlobListing> {
  const dir = join(repoDir, 'blobs');
  const names = await dirEntries(dir);
  const paths = names.map((name) => join(dir, name));
  const stats = await mapConcurrent(paths, FILE_CALLS_AT_ONCE, (path) => lstat(path).catch(() => undefined));
  return { dir, entries: names.map((name, i) => ({ name, path: paths[i] as string, stats: stats[i] })) };
}

/** Bytes of a listing's blobs: the whole and the partial ones. */
function bytesOf(listing: BlobListing): { bytes: number; partialBytes: number } {
  let bytes = 0;
  let partialBytes = 0;
  for (const { name, stats } of listing.entries) {
    if (!stats?.isFile()) continue;
    bytes += stats.size;
    if (name.endsWith('.incomplete')) partialBytes += stats.size;
  }
  return { bytes, partialBytes };
}

/** Bytes of a model folder's blobs: the whole and the partial ones. */
async function blobBytes(repoDir: string): Promise<{ bytes: number; partialBytes: number }> {
  return bytesOf(await listBlobs(repoDir));
}

/**
 * Whether `commit`'s snapshot is whole: the manifest says so, and every blob
 * is on disk at its listed size with its link in place (a blob deleted by
 * hand, or one a crash left short, makes it incomplete again).
 */
export async function isSnapshotComplete(layout: StoreLayout, manifest: ModelManifest | undefined, commit: string, listing?: BlobListing): Promise<boolean> {
  const snap = manifest?.snapshots[commit];
  if (!manifest || !snap?.complete) return false;
  // A blob the listing found a regular file needs no stat of its own: the stat that follows links would say the same.
  const listed = new Map(listing?.entries.flatMap((e) => (e.stats?.isFile() ? [[e.path, e.stats] as const] : [])));
  const whole = await mapConcurrent(snap.files, FILE_CALLS_AT_ONCE, async (f) => {
    const path = layout.blobPath(manifest.repo, f.etag);
    const [blob, link] = await Promise.all([
      listed.get(path) ?? stat(path).catch(() => undefined),
      lstat(layout.pointerPath(manifest.repo, commit, f.path)).catch(() => undefined),
    ]);
    return blob?.isFile() === true && blob.size === f.size && link?.isSymbolicLink() === true;
  });
  return whole.every(Boolean);
}

/** StoredModel's complete: a snapshot at least, every one whole, and no partial download. */
function completeOf(snapshots: number, wholeSnapshots: number, partialBytes: number): boolean {
  return snapshots > 0 && wholeSnapshots === snapshots && partialBytes === 0;
}

/**
 * Whether the model of `manifest` is complete as describeModel says, from
 * the manifest and the blobs alone: what a warm asks before it reads,
 * without the pins, times of use and pull's lock a listing adds, whose
 * file calls were a third of a warm's set-up (issue 52, item 2). `listing`
 * is the folder's (listBlobs), read once for this and the warm's files.
 */
export async function isModelWhole(layout: StoreLayout, manifest: ModelManifest | undefined, listing: BlobListing): Promise<boolean> {
  if (!manifest) return false;
  const snapshots = Object.keys(manifest.snapshots);
  const whole = await Promise.all(snapshots.map((commit) => isSnapshotComplete(layout, manifest, commit, listing)));
  return completeOf(snapshots.length, whole.filter(Boolean).length, bytesOf(listing).partialBytes);
}

/** Whether `repo` at `revision` (a branch, tag or commit) is complete in the store, for the files its pull chose; an offline start asks more (offlineProblem). */
export async function isModelComplete(layout: StoreLayout, repo: string, revision: string): Promise<boolean> {
  const manifest = await readManifest(layout, repo);
  const commit = manifest?.refs[revision] ?? (COMMIT_HASH.test(revision) ? revision : undefined);
  return commit !== undefined && isSnapshotComplete(layout, manifest, commit);
}

export async function describeModel(layout: StoreLayout, repo: string): Promise<StoredModel> {
  const repoDir = layout.repoDir(repo);
  // Side by side: none of these needs another's answer, and one after the other their round trips were
  // most of a warm's set-up (issue 52, item 2).
  const [manifest, { bytes, partialBytes }, pulling, dirMtime, pinMtime, pins] = await Promise.all([
    readManifest(layout, repo),
    blobBytes(repoDir),
    tryLockModel(layout, repo).then((lock) => {
      lock?.release();
      return lock === undefined;
    }),
    stat(repoDir).then((s) => s.mtimeMs, () => 0),
    // A pin or unpin changes the pin folder's mtime: a shard's start and stop count as use, without
    // the pinner rewriting the manifest a pull may be writing at the same moment.
    stat(layout.pinDir(repo)).then((s) => s.mtimeMs, () => 0),
    modelPins(layout, repo),
  ]);
  const snapshots = Object.keys(manifest?.snapshots ?? {});
  const whole = await Promise.all(snapshots.map((commit) => isSnapshotComplete(layout, manifest, commit)));
  const completeCommits = snapshots.filter((_, i) => whole[i]);
  const adapter = manifest?.kind === 'adapter' ? checkedAdapterMeta(manifest.adapter) : undefined;
  return {
    repo,
    kind: manifest?.kind === 'adapter' ? 'adapter' : 'model',
    ...(adapter ? { baseModel: adapter.baseModel, rank: adapter.rank } : {}),
    refs: boundedRefs(manifest?.refs ?? {}),
    completeCommits,
    complete: completeOf(snapshots.length, completeCommits.length, partialBytes),
    subset: snapshots.some((c) => (manifest?.snapshots[c]?.include.length ?? 0) > 0),
    bytes,
    partialBytes,
    lastUsedMs: Math.max(manifest?.lastUsedMs ?? dirMtime, pinMtime),
    pins,
    pulling,
  };
}

/** Every model folder under the store's hub cache, by repo id. */
export async function scanStore(layout: StoreLayout): Promise<StoredModel[]> {
  const out: StoredModel[] = [];
  for (const folder of (await dirEntries(layout.hubDir)).sort()) {
    const repo = repoFromFolderName(folder);
    if (repo === undefined) continue;
    out.push(await describeModel(layout, repo));
  }
  return out;
}

/** Refs of one model a scan reports: no store has more, and every one goes into each Register. */
export const MAX_REFS_PER_MODEL = 32;

/**
 * A manifest's refs as the scan reports them (security review 3, S2): only
 * revision names checkRevision accepts, each to a 40-hex commit, at most
 * MAX_REFS_PER_MODEL. A record written by anyone else (100,001 refs, one of
 * them terminal escapes) made a Register no gRPC control plane accepts and
 * a `models list` that rewrote the operator's terminal.
 */
function boundedRefs(refs: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  let n = 0;
  for (const [rev, commit] of Object.entries(refs)) {
    if (n >= MAX_REFS_PER_MODEL) break;
    if (typeof commit !== 'string' || !COMMIT_HASH.test(commit)) continue;
    try {
      checkRevision(rev);
    } catch {
      continue;
    }
    out[rev] = commit;
    n++;
  }
  return out;
}
