import { join, relative, dirname } from 'node:path';
import { repoFolderName } from './repo-id.js';

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
 */
export class StoreLayout {
  constructor(readonly cacheDir: string) {}

  get hubDir(): string {
    return join(this.cacheDir, 'hub');
  }

  get compileDir(): string {
    return join(this.cacheDir, 'compile');
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

  pinDir(repo: string): string {
    return join(this.ownDir, 'pins', repoFolderName(repo));
  }
}
