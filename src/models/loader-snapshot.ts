import { createHash } from 'node:crypto';
import { type ManifestFile, type ModelManifest, readManifest } from './model-manifest.js';
import { COMMIT_HASH } from './repo-id.js';
import { filesAnyLoaderReads, filesLoaderReads, type LoaderRule, MISTRAL_INDEX, SAFE_WEIGHTS_INDEX, weightMapFiles } from './loader-files.js';
import { isSnapshotComplete } from './scan-store.js';
import { openStoreFile, READ } from './store-files.js';
import type { StoreLayout } from './store-layout.js';

/** An index larger than this is not read (a real one is a few MiB at most): its weights all count. */
const MAX_INDEX_BYTES = 32 * 1024 * 1024;

/** One revision of a model as a start's loader sees it in the store (loader-files.ts). */
export interface LoaderSnapshot {
  repo: string;
  commit: string;
  /** Files the loader reads that the store holds, verified and linked: what residency is counted over and a warm reads first. */
  present: ManifestFile[];
  /** Files the loader reads that the store does not hold; undefined when the pull did not record the repo's listing, so nobody can say. */
  missing: string[] | undefined;
  /** The pull of this revision is whole (every file it chose verified and linked). */
  pulledComplete: boolean;
  /** The --include patterns of its pull; empty for the whole repo. */
  include: string[];
}

/** The revision's commit: the ref it resolved to at the pull, or the commit itself. */
export function commitOf(manifest: ModelManifest | undefined, revision: string): string | undefined {
  return manifest?.refs[revision] ?? (COMMIT_HASH.test(revision) ? revision : undefined);
}

/**
 * What `rule`'s loader (or, for 'any', vLLM's and SGLang's default loaders
 * together, which is what Inventory judges) reads of `repo` at `commit`,
 * split into what the store holds and what it lacks. The repo's listing is
 * the pull's: the whole snapshot for a pull without --include, the hub's
 * listing the pull recorded otherwise.
 */
export async function loaderSnapshot(layout: StoreLayout, manifest: ModelManifest, commit: string, rule: LoaderRule | 'any'): Promise<LoaderSnapshot> {
  const snap = manifest.snapshots[commit];
  // Side by side: the pull's completeness and the loader's choice (its index read) need nothing of each other.
  const [pulledComplete, reads] = await Promise.all([isSnapshotComplete(layout, manifest, commit), loaderReads(layout, manifest, commit, rule)]);
  if (!snap || !reads) return { repo: manifest.repo, commit, present: [], missing: undefined, pulledComplete: false, include: [] };
  return { repo: manifest.repo, commit, ...reads, pulledComplete, include: snap.include };
}

/**
 * What `rule`'s loader reads of `repo` at `commit`, held and lacking, as
 * loaderSnapshot says, without the pull's completeness (a stat of every
 * blob and link): what a warm orders its reads by, having judged the
 * model whole itself. Undefined when the manifest has no such snapshot.
 */
export async function loaderReads(layout: StoreLayout, manifest: ModelManifest, commit: string, rule: LoaderRule | 'any'): Promise<Pick<LoaderSnapshot, 'present' | 'missing'> | undefined> {
  const snap = manifest.snapshots[commit];
  if (!snap) return undefined;
  const listing = snap.include.length === 0 ? snap.files.map((f) => f.path) : snap.repoFiles;
  const byPath = new Map(snap.files.map((f) => [f.path, f]));
  const indexes = new Map<string, string[]>();
  for (const name of [SAFE_WEIGHTS_INDEX, MISTRAL_INDEX]) {
    const f = byPath.get(name);
    const named = f && (await readIndex(layout, manifest.repo, f));
    if (named) indexes.set(name, named);
  }
  const readIndexOf = (p: string) => indexes.get(p);
  // Without the repo's listing, what the loader reads is judged from what was pulled; what was left out nobody can say.
  const reads = (files: readonly string[]) => (rule === 'any' ? filesAnyLoaderReads(files, readIndexOf) : filesLoaderReads(files, readIndexOf, rule));
  const wanted = reads(listing ?? snap.files.map((f) => f.path));
  const present = wanted.flatMap((p) => byPath.get(p) ?? []);
  const missing = listing === undefined ? undefined : wanted.filter((p) => !byPath.has(p));
  return { present, missing };
}

/** loaderSnapshot of `repo` at `revision`, or undefined when the store has no such revision. */
export async function loaderSnapshotAt(layout: StoreLayout, repo: string, revision: string, rule: LoaderRule | 'any'): Promise<LoaderSnapshot | undefined> {
  const manifest = await readManifest(layout, repo);
  const commit = commitOf(manifest, revision);
  if (!manifest || commit === undefined) return undefined;
  return loaderSnapshot(layout, manifest, commit, rule);
}

/** Whether a start's loader finds everything it reads in the store: the pull whole, nothing it reads left out. */
export function loaderComplete(s: LoaderSnapshot | undefined): boolean {
  return s?.pulledComplete === true && s.missing?.length === 0;
}

async function readIndex(layout: StoreLayout, repo: string, f: ManifestFile): Promise<string[] | undefined> {
  if (f.size > MAX_INDEX_BYTES) return undefined;
  try {
    const fh = await openStoreFile(layout.blobPath(repo, f.etag), READ);
    try {
      return weightMapFiles(await fh.readFile({ encoding: 'utf8' }));
    } finally {
      await fh.close();
    }
  } catch {
    return undefined;
  }
}

/**
 * The identity of a revision by content (issue 51): sha256 over the sorted
 * "<path> <etag>" lines of the files the loader reads, each etag the digest
 * the pull verified its bytes against. Two checkpoints of one layout under
 * one name differ here; the same bytes pulled on two nodes agree.
 */
export function contentDigest(s: Pick<LoaderSnapshot, 'present'>): string {
  const lines = s.present.map((f) => `${f.path} ${f.etag}\n`).sort();
  return `sha256:${createHash('sha256').update(lines.join('')).digest('hex')}`;
}
