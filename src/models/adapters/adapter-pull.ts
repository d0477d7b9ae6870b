import { usageError } from '../../lib/errors.js';
import type { HubFile } from '../hub-client.js';
import { openStoreFile, READ } from '../store-files.js';
import type { StoreLayout } from '../store-layout.js';
import { ADAPTER_CONFIG, type AdapterMeta, MAX_ADAPTER_CONFIG_BYTES, adapterFilesRead, incompleteAdapterError, isAdapterListing, parseAdapterConfig } from './adapter-files.js';

/** What a pull of an adapter repo does beyond a model's: its config first, read before the weights are fetched. */
export interface AdapterPullPlan {
  /** The revision's adapter_config.json as the hub listed it. */
  config: HubFile;
  /** The files the LoRA loaders read (adapter-files.ts). */
  reads: string[];
}

/**
 * The adapter part of a pull, judged on the hub's listing before any byte is
 * written: undefined for a repo that is not an adapter (no top-level
 * adapter_config.json); a one-line refusal when the revision, or the files
 * --include chose of it, lack what vLLM and SGLang load.
 */
export function planAdapterPull(repo: string, revision: string, listing: readonly HubFile[], chosen: readonly HubFile[]): AdapterPullPlan | undefined {
  const paths = listing.map((f) => f.path);
  if (!isAdapterListing(paths)) return undefined;
  const { reads, missing } = adapterFilesRead(paths);
  if (missing.length > 0) throw incompleteAdapterError(repo, revision, missing, 'the revision');
  const picked = new Set(chosen.map((f) => f.path));
  const left = reads.filter((p) => !picked.has(p));
  if (left.length > 0) throw usageError(`--include leaves out ${left.join(', ')} of the LoRA adapter ${repo}@${revision}, which vLLM and SGLang load; include it (or pull without --include)`);
  const config = listing.find((f) => f.path === ADAPTER_CONFIG) as HubFile;
  if (config.size > MAX_ADAPTER_CONFIG_BYTES) throw usageError(`${repo}@${revision}'s ${ADAPTER_CONFIG} is ${config.size} bytes; a LoRA adapter's is a few KiB, so it is not read`);
  return { config, reads };
}

/** The adapter's base and rank from its config blob in the store (verified by the pull against its etag). */
export async function readAdapterMeta(layout: StoreLayout, repo: string, revision: string, etag: string): Promise<AdapterMeta> {
  const fh = await openStoreFile(layout.blobPath(repo, etag), READ);
  let text: string;
  try {
    const st = await fh.stat();
    if (st.size > MAX_ADAPTER_CONFIG_BYTES) throw usageError(`${repo}@${revision}'s ${ADAPTER_CONFIG} in the store is ${st.size} bytes; a LoRA adapter's is a few KiB, so it is not read`);
    text = await fh.readFile({ encoding: 'utf8' });
  } finally {
    await fh.close();
  }
  return parseAdapterConfig(text, `${repo}@${revision}`);
}
