import { createHash } from 'node:crypto';
import { lstat, readFile, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { failure } from '../lib/errors.js';
import { writeFileAtomic } from '../lib/write-file-atomic.js';
import type { ManifestFile } from './model-manifest.js';
import { repoFolderName } from './repo-id.js';
import { makeStoreDir, openStoreFile, READ } from './store-files.js';
import type { StoreLayout } from './store-layout.js';

/*
 * A store blob changed in place is verified again before a start uses it
 * (issue 51): the pull verified each blob against its etag (sha256 for LFS
 * files, git blob sha1 otherwise), but an overwrite afterwards (a tool, an
 * operator's cp, a bad disk) kept its name, and the engine served other
 * bytes under the model's identity (the field's overwritten cache file that
 * made an engine answer garbage while a judge scored it green). What was
 * verified is recorded per blob as (size, mtime, ctime, inode); a start
 * re-hashes a blob whose stat differs, and a blob that no longer hashes to
 * its etag refuses the start naming the file.
 *
 * A blob with no record yet is trusted as the pull verified it when it has
 * not changed since its manifest was written (ctime at or before the
 * manifest's mtime: the manifest is written complete after the last blob
 * was renamed into place); otherwise it is hashed once.
 */

export interface BlobStat {
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
}

type Records = Record<string, BlobStat>;

/** Where the records of `repo` are kept: llmgw's own folder, beside the manifests. */
export function verifiedPath(layout: StoreLayout, repo: string): string {
  return join(layout.ownDir, 'verified', `${repoFolderName(repo)}.json`);
}

const same = (a: BlobStat, b: BlobStat) => a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs && a.ino === b.ino;

async function readRecords(layout: StoreLayout, repo: string): Promise<Records> {
  try {
    const r = JSON.parse(await readFile(verifiedPath(layout, repo), 'utf8')) as unknown;
    return typeof r === 'object' && r !== null ? (r as Records) : {};
  } catch {
    return {};
  }
}

/** The digest `f`'s etag names, of the bytes at `path`. */
async function hashMatches(path: string, f: ManifestFile): Promise<boolean> {
  const lfs = f.sha256 !== undefined || /^[0-9a-f]{64}$/.test(f.etag);
  const h = lfs ? createHash('sha256') : createHash('sha1').update(`blob ${(await lstat(path)).size}\0`);
  const fh = await openStoreFile(path, READ);
  try {
    for await (const chunk of fh.createReadStream({ highWaterMark: 4 * 1024 * 1024 })) h.update(chunk as Buffer);
  } finally {
    await fh.close();
  }
  return h.digest('hex') === (f.sha256 ?? f.etag);
}

/** What one check found: blobs hashed again (changed in place, or never recorded and newer than the manifest). */
export interface VerifyOutcome {
  rehashed: string[];
}

/**
 * Checks the store's blobs of `files` (one revision of `repo`) before a start
 * reads them; throws a one-line failure naming the first file whose blob no
 * longer holds what was verified.
 */
export async function verifyBlobsForStart(layout: StoreLayout, repo: string, revision: string, files: readonly ManifestFile[]): Promise<VerifyOutcome> {
  const records = await readRecords(layout, repo);
  const manifestMtime = (await stat(layout.manifestPath(repo)).catch(() => undefined))?.mtimeMs ?? 0;
  const rehashed: string[] = [];
  let changed = false;
  for (const f of files) {
    const path = layout.blobPath(repo, f.etag);
    const st = await lstat(path);
    const now: BlobStat = { size: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino };
    const rec = records[f.etag];
    if (rec && same(rec, now)) continue;
    if (!rec && st.ctimeMs <= manifestMtime && st.size === f.size) {
      records[f.etag] = now;
      changed = true;
      continue;
    }
    rehashed.push(f.path);
    if (st.size !== f.size || !(await hashMatches(path, f))) {
      throw failure(
        `the store's ${f.path} of ${repo}@${revision} (${path}) changed in place since it was verified and no longer hashes to ${f.etag}; the start is refused: pull the model again (llmgw models rm ${repo}; llmgw models pull ${repo})`,
      );
    }
    records[f.etag] = now;
    changed = true;
  }
  if (changed) {
    const p = verifiedPath(layout, repo);
    await makeStoreDir(layout, dirname(p));
    await writeFileAtomic(p, `${JSON.stringify(records)}\n`, 0o644);
  }
  return { rehashed };
}
