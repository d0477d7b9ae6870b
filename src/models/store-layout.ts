import { join, relative, dirname } from 'node:path';
import { createHash } from 'node:crypto';
import { checkRepoId, repoFolderName } from './repo-id.js';

/**
 * Every path of the model store, derived in this one module (like
 * shard-layout.ts for shards).
 *
 * `<cache_dir>/hub` is a Hugging Face hub cache exactly as huggingface_hub's
 * file_download.py writes it (hf_hub_download's docstring; _create_symlink;
 * _cache_commit_hash_for_specific_revision), so an engine given
 * HF_HUB_CACHE=<cache_dir>/hub finds every file without a request:
 *
 *   hub/models--org--name/blobs/<etag>               the bytes; etag = sha256 for LFS files, git blob sha1 otherwise
 *   hub/models--org--name/snapshots/<commit>/<file>  relative symlink ../../blobs/<etag> (one ../ more per subfolder)
 *   hub/models--org--name/refs/<revision>            the commit a branch or tag resolved to
 *
 * A blob being downloaded is `blobs/<etag>.incomplete`, the name
 * huggingface_hub gives it; it is never linked from a snapshot.
 *
 * What is llmgw's own stays outside the repo folders, under
 * `<cache_dir>/llmgw`, so huggingface_hub's scan_cache_dir sees no strange
 * files: one manifest per model (what was pulled, whether it is complete,
 * when it was last used), one lock per model (one pull at a time across
 * processes), and the pins of the shards that use it.
 *
 * All of that is the agent's (root's), read-only to engines (store-trust.ts
 * says why). The one place engines write is their own caches, one per
 * trust domain (security review 3, S9): `engines/<uid>/<engine>/<model>`
 * (compiled graphs, and the hub cache of an online start), the leaf the
 * engine account's, every folder above it root's.
 */
export class StoreLayout {
  constructor(readonly cacheDir: string) {}

  get hubDir(): string {
    return join(this.cacheDir, 'hub');
  }

  get engineCachesDir(): string {
    return join(this.cacheDir, 'engines');
  }

  /**
   * The compile caches of engine `engine` run as `uid` for model `model` (a
   * hub id or a local path): no engine loads code that another account,
   * engine or model's engine could have written.
   */
  engineCacheDir(uid: number, engine: string, model: string): string {
    return join(this.engineCachesDir, String(uid), safeName(engine), modelCacheKey(model));
  }

  get ownDir(): string {
    return join(this.cacheDir, 'llmgw');
  }

  repoDir(repo: string): string {
    return join(this.hubDir, repoFolderName(repo));
  }

  blobPath(repo: string, etag: string): string {
    return join(this.repoDir(repo), 'blobs', etag);
  }

  incompletePath(repo: string, etag: string): string {
    return `${this.blobPath(repo, etag)}.incomplete`;
  }

  snapshotDir(repo: string, commit: string): string {
    return join(this.repoDir(repo), 'snapshots', commit);
  }

  pointerPath(repo: string, commit: string, file: string): string {
    return join(this.snapshotDir(repo, commit), ...file.split('/'));
  }

  /** What a snapshot's symlink holds: the blob relative to the link's folder, as huggingface_hub writes it. */
  pointerTarget(repo: string, commit: string, file: string, etag: string): string {
    return relative(dirname(this.pointerPath(repo, commit, file)), this.blobPath(repo, etag));
  }

  refPath(repo: string, revision: string): string {
    return join(this.repoDir(repo), 'refs', ...revision.split('/'));
  }

  manifestPath(repo: string): string {
    return join(this.ownDir, 'models', `${repoFolderName(repo)}.json`);
  }

  lockPath(repo: string): string {
    return join(this.ownDir, 'locks', `${repoFolderName(repo)}.lock`);
  }

  /** The node's one page-cache warm at a time (warm-gate.ts); no repo's folder name has this shape. */
  warmLockPath(): string {
    return join(this.ownDir, 'locks', 'page-cache-warm.lock');
  }

  pinDir(repo: string): string {
    return join(this.ownDir, 'pins', repoFolderName(repo));
  }
}

/** A config key's name as a folder name: engines are named by operators, so anything else is hashed. */
export function safeName(name: string): string {
  return /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(name) ? name : `h-${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
}

/** A model's compile-cache folder: its hub cache folder name for a hub id, a hash for a local path. */
export function modelCacheKey(model: string): string {
  try {
    return repoFolderName(checkRepoId(model));
  } catch {
    return `path--${createHash('sha256').update(model).digest('hex').slice(0, 16)}`;
  }
}
