import { readManifest } from '../../models/model-manifest.js';
import { contentDigest, loaderComplete, loaderSnapshot } from '../../models/loader-snapshot.js';
import type { StoredModel } from '../../models/scan-store.js';
import type { StoreLayout } from '../../models/store-layout.js';

/** One revision of a stored model as a start's loader sees it (loader-snapshot.ts): what Inventory says of it. */
export interface RevisionView {
  /** Every file vLLM's and SGLang's loaders read is in the store, verified. */
  complete: boolean;
  /** Bytes of those files the store holds. */
  loadBytes: number;
  /** Their blob paths: what residency is counted over and a warm reads first. */
  blobPaths: string[];
  /** contentDigest, when complete. */
  digest: string;
}

export const revisionKey = (repo: string, revision: string) => `${repo}\0${revision}`;

/**
 * Each pulled revision of `models` judged by the loaders' rules (issue 51,
 * review engine-fidelity-3 E11/E12): a pull of *.json alone is not
 * complete; one that left out only original/ and .bin twins is.
 */
export async function revisionViews(layout: StoreLayout, models: readonly StoredModel[]): Promise<Map<string, RevisionView>> {
  const out = new Map<string, RevisionView>();
  for (const m of models) {
    const manifest = await readManifest(layout, m.repo);
    if (!manifest) continue;
    for (const [revision, commit] of Object.entries(m.refs)) {
      const s = await loaderSnapshot(layout, manifest, commit, 'any');
      const complete = loaderComplete(s);
      out.set(revisionKey(m.repo, revision), {
        complete,
        loadBytes: s.present.reduce((n, f) => n + f.size, 0),
        blobPaths: [...new Set(s.present.map((f) => layout.blobPath(m.repo, f.etag)))],
        digest: complete ? contentDigest(s) : '',
      });
    }
  }
  return out;
}
