import { lstat, readlink } from 'node:fs/promises';
import { relative, sep } from 'node:path';
import { failure, usageError } from '../../lib/errors.js';
import { contentDigest, commitOf } from '../loader-snapshot.js';
import { type ManifestFile, readManifest } from '../model-manifest.js';
import { COMMIT_HASH, checkRepoId, checkRevision } from '../repo-id.js';
import type { StoreLayout } from '../store-layout.js';
import { verifyBlobsForStart } from '../verified-blobs.js';
import { ADAPTER_CONFIG, type AdapterConfigFeatures, adapterFilesRead, incompleteAdapterError, isAdapterListing } from './adapter-files.js';
import { readAdapterMeta } from './adapter-pull.js';

/** A blob's name: a git blob sha1 or an LFS sha256. */
const ETAG = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/** One LoRA adapter of the store, ready to be given to an engine (the contract of issue 53 between the store and the agent). */
export interface StoreAdapter {
  repo: string;
  revision: string;
  commit: string;
  /** the snapshot folder holding adapter_config.json and the weights; what the engine is given as lora_path */
  dir: string;
  /** the store's verified content digest of the adapter's files at that revision (same scheme as a model's content_digest) */
  digest: string;
  /** adapter_config.json base_model_name_or_path */
  baseModel: string;
  /** adapter_config.json r */
  rank: number;
  /** adapter_config.json's use_dora, modules_to_save, bias: what some engines refuse. */
  features?: AdapterConfigFeatures;
  /** Bytes of the files the LoRA loaders read. */
  bytes: number;
}

/**
 * `repo` at `revision` as an adapter the store holds whole: the files vLLM's
 * and SGLang's LoRA loaders read (adapter-files.ts) verified and linked,
 * each blob checked again if it changed since it was verified
 * (verified-blobs.ts), and its identity the content digest of those files.
 *
 * `dir` is always the store's own snapshot folder, made from a checked repo
 * id and a 40-hex commit, never a path anyone passed in; it and its links
 * are checked to be the store's (real folders, each link to its own blob),
 * so what an engine loads is what was verified. vLLM takes an absolute
 * lora_path as it is (V:vllm/lora/utils.py:332, get_adapter_absolute_path
 * at 017e9f44); SGLang reads a folder that exists without the hub
 * (S:python/sglang/srt/lora/lora_config.py:79 at 6ed5780c).
 *
 * One-line usageError when it is not in the store, not an adapter, or
 * incomplete; a failure when a blob changed in place.
 */
export async function resolveStoreAdapter(layout: StoreLayout, repo: string, revision: string): Promise<StoreAdapter> {
  checkRepoId(repo);
  checkRevision(revision);
  const pullAgain = `llmgw models pull ${repo} --revision ${revision}`;
  const manifest = await readManifest(layout, repo);
  const commit = commitOf(manifest, revision);
  const snap = commit !== undefined && COMMIT_HASH.test(commit) ? manifest?.snapshots[commit] : undefined;
  if (commit === undefined || snap === undefined || !Array.isArray(snap.files)) {
    // A pull records the revision's ref only once it completed: one stopped half-way left a snapshot and no ref.
    const unfinished = manifest !== undefined && typeof manifest.snapshots === 'object' && Object.values(manifest.snapshots).some((x) => x?.complete === false);
    throw usageError(`the LoRA adapter ${repo}@${revision} is not in the model store${unfinished ? ` (a pull of ${repo} did not finish)` : ''}; pull it first (${pullAgain})`);
  }
  const listing = Array.isArray(snap.repoFiles) && snap.repoFiles.every((p) => typeof p === 'string') ? snap.repoFiles : snap.files.map((f) => f.path);
  if (!isAdapterListing(listing)) {
    throw usageError(`${repo}@${revision} is not a LoRA adapter: it has no top-level ${ADAPTER_CONFIG} (a PEFT adapter has ${ADAPTER_CONFIG} and adapter_model.safetensors); name an adapter repo`);
  }
  const { reads, missing } = adapterFilesRead(listing);
  if (missing.length > 0) throw incompleteAdapterError(repo, revision, missing, 'the revision');
  const byPath = new Map(snap.files.map((f) => [f.path, f]));
  const present: ManifestFile[] = [];
  for (const path of reads) {
    const f = byPath.get(path);
    if (f === undefined) throw incompleteAdapterError(repo, revision, [path], `the store's copy (pulled with --include ${snap.include.join(' ')})`);
    // A blob is named by its digest; a record naming anything else would send the engine out of the store.
    if (typeof f.etag !== 'string' || !ETAG.test(f.etag) || !Number.isSafeInteger(f.size)) throw failure(`the store's record of ${repo}@${revision} names ${path}'s blob ${JSON.stringify(f.etag).slice(0, 80)}, not a digest; refused: remove the adapter (llmgw models rm ${repo}) and pull it again`);
    present.push(f);
  }
  if (!snap.complete) throw usageError(`the LoRA adapter ${repo}@${revision} is incomplete in the model store: its pull did not finish; pull it again (${pullAgain})`);
  const dir = layout.snapshotDir(repo, commit);
  await checkStoreFolder(layout, dir, repo, revision);
  for (const f of present) {
    const problem = await linkProblem(layout, repo, commit, f);
    if (problem) throw usageError(`the LoRA adapter ${repo}@${revision} is incomplete in the model store: its ${f.path} ${problem}; pull it again (${pullAgain})`);
  }
  await verifyBlobsForStart(layout, repo, revision, present);
  const config = present.find((f) => f.path === ADAPTER_CONFIG) as ManifestFile;
  const meta = await readAdapterMeta(layout, repo, revision, config.etag);
  return {
    repo,
    revision,
    commit,
    dir,
    digest: contentDigest({ present }),
    baseModel: meta.baseModel,
    rank: meta.rank,
    ...(meta.features ? { features: meta.features } : {}),
    bytes: present.reduce((s, f) => s + f.size, 0),
  };
}

/** The snapshot folder and every folder from the hub cache down to it are real folders inside the store, no link. */
async function checkStoreFolder(layout: StoreLayout, dir: string, repo: string, revision: string): Promise<void> {
  const rel = relative(layout.hubDir, dir);
  if (rel === '' || rel.startsWith('..') || rel.split(sep).includes('..')) throw failure(`the snapshot folder of ${repo}@${revision} (${dir}) is not inside the store's hub cache; refused`);
  let at = layout.hubDir;
  for (const part of rel.split(sep)) {
    at = `${at}${sep}${part}`;
    const st = await lstat(at).catch(() => undefined);
    if (st === undefined) throw usageError(`the LoRA adapter ${repo}@${revision} is incomplete in the model store: ${at} is gone; pull it again (llmgw models pull ${repo} --revision ${revision})`);
    if (!st.isDirectory()) throw failure(`${at} of the adapter ${repo}@${revision} is not a folder of the store (a link or a file put there); refused: remove the adapter (llmgw models rm ${repo}) and pull it again`);
  }
}

/** Why a snapshot's link of `f` is not the store's link to its verified blob, or undefined when it is. */
async function linkProblem(layout: StoreLayout, repo: string, commit: string, f: ManifestFile): Promise<string | undefined> {
  const pointer = layout.pointerPath(repo, commit, f.path);
  const target = await readlink(pointer).catch(() => undefined);
  if (target === undefined) return 'link is missing';
  if (target !== layout.pointerTarget(repo, commit, f.path, f.etag)) return `link points elsewhere (${JSON.stringify(target).slice(0, 80)})`;
  const blob = await lstat(layout.blobPath(repo, f.etag)).catch(() => undefined);
  if (!blob?.isFile()) return 'blob is missing';
  if (blob.size !== f.size) return `blob holds ${blob.size} bytes, not ${f.size}`;
  return undefined;
}
