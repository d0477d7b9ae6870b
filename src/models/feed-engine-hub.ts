import { spawn } from 'node:child_process';
import { lstat, mkdir, symlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { failure } from '../lib/errors.js';
import type { LoaderRule } from './loader-files.js';
import { loaderSnapshotAt } from './loader-snapshot.js';
import { repoFolderName } from './repo-id.js';
import type { StoreLayout } from './store-layout.js';
import { verifyBlobsForStart } from './verified-blobs.js';

/*
 * An online start fed from the store (issue 51): a start whose model the
 * store holds only in part runs online, into the engine's own hub cache
 * (engine-cache-env.ts: the store is read-only to engines), and the engine
 * downloaded the whole model again, into a second copy, while the store held
 * most of it (review engine-fidelity-3 E12: 9 hub requests for a repo pulled
 * with `*.safetensors *.json tokenizer*`). So before such a start the
 * engine's hub cache gets a link for every file the store holds of that
 * revision that its loader reads, pointing at the store's blob:
 *
 *   <engine cache>/hub/models--org--name/snapshots/<commit>/<path> -> <cache_dir>/hub/models--org--name/blobs/<etag>
 *
 * huggingface_hub's snapshot_download resolves the revision to its commit
 * and asks hf_hub_download for each file by that commit, which returns an
 * existing pointer at once, with no request (file_download.py
 * _hf_hub_download_to_cache_dir: "if user provides a commit_hash and they
 * already have the file on disk, shortcut everything"); os.path.exists
 * follows the link. So the engine fetches exactly the files the store lacks.
 *
 * The blobs stay the agent's and read-only to the engine: it can read them,
 * never change them, and a link it replaces is its own. Each blob is
 * checked against what was verified first (verified-blobs.ts), so an online
 * start never reads a blob changed in place, as an offline one never does.
 *
 * The links are made by the engine's account, never by root: the folder is
 * that account's (the leaf of prepareEngineCache), and root following links
 * the account may have planted there would create files wherever they
 * point. A root agent runs a short `node -e` as the account (uid, gid) to
 * make them; an agent that is the account makes them itself.
 */

/** What feedEngineHub linked: files of the revision the loader reads that the store holds. */
export interface FedFiles {
  commit: string;
  linked: string[];
  /** Why the links could not be made (the engine then downloads them: slower, never wrong); undefined when they were. */
  error?: string;
}

export interface FeedEngineHubOptions {
  layout: StoreLayout;
  repo: string;
  revision: string;
  rule: LoaderRule;
  /** The engine's own hub cache (its HF_HUB_CACHE online: <engine cache>/hub). */
  engineHubDir: string;
  /** The engine's account when the agent is root and the engine runs as another; undefined: the agent's own. */
  account?: { uid: number; gid: number };
}

/** The longest the account's linking may take: a few thousand links on a local disk take well under a second. */
const LINK_TIMEOUT_MS = 30_000;

/**
 * Links the store's verified files of the revision into the engine's hub
 * cache; undefined when the store holds none. Throws (refusing the start,
 * naming the file) when a blob no longer holds what was verified.
 */
export async function feedEngineHub(o: FeedEngineHubOptions): Promise<FedFiles | undefined> {
  const s = await loaderSnapshotAt(o.layout, o.repo, o.revision, o.rule);
  if (!s) return undefined;
  // A blob is renamed into place only once verified (blob-writer.ts): one that is not there was never verified.
  const held = [];
  for (const f of s.present) if ((await lstat(o.layout.blobPath(o.repo, f.etag)).catch(() => undefined))?.isFile()) held.push(f);
  if (held.length === 0) return undefined;
  await verifyBlobsForStart(o.layout, o.repo, o.revision, held);
  const snap = join(o.engineHubDir, repoFolderName(o.repo), 'snapshots', s.commit);
  const links = held.map((f) => [o.layout.blobPath(o.repo, f.etag), join(snap, ...f.path.split('/'))] as const);
  try {
    if (o.account) await linkAs(o.account, links);
    else await makeLinks(links);
  } catch (err) {
    return { commit: s.commit, linked: [], error: err instanceof Error ? err.message : String(err) };
  }
  return { commit: s.commit, linked: held.map((f) => f.path) };
}

/** Makes each link unless something is at its path already (the engine's own download, or an earlier start's link). */
async function makeLinks(links: readonly (readonly [string, string])[]): Promise<void> {
  for (const [target, path] of links) {
    await mkdir(dirname(path), { recursive: true });
    await symlink(target, path).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
  }
}

/** makeLinks, as the engine's account, in a process of its own: the same steps, self-contained for `node -e`. */
const LINK_SCRIPT = `const fs=require('node:fs'),path=require('node:path');try{for(const [t,p] of JSON.parse(process.argv[1])){fs.mkdirSync(path.dirname(p),{recursive:true});try{fs.symlinkSync(t,p)}catch(e){if(e.code!=='EEXIST')throw e}}}catch(e){process.stderr.write(String(e&&e.message||e));process.exit(1)}`;

function linkAs(account: { uid: number; gid: number }, links: readonly (readonly [string, string])[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', LINK_SCRIPT, JSON.stringify(links)], { uid: account.uid, gid: account.gid, stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: '/usr/bin:/bin' }, timeout: LINK_TIMEOUT_MS });
    let err = '';
    child.stderr?.on('data', (d: Buffer) => {
      if (err.length < 2000) err += d.toString();
    });
    child.on('error', (e) => reject(failure(`could not link the store's files into the engine's hub cache as uid ${account.uid}: ${e.message}`)));
    child.on('exit', (code, signal) => {
      if (code === 0) resolve();
      else reject(failure(`could not link the store's files into the engine's hub cache as uid ${account.uid} (${signal ?? `exit ${code}`}): ${err.trim().split('\n')[0] ?? ''}`));
    });
  });
}
