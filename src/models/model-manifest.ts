import { constants, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { makeStoreDir, READ } from './store-files.js';
import { dirname } from 'node:path';
import { isNotFound } from '../lib/errno.js';
import { writeFileAtomic } from '../lib/write-file-atomic.js';
import type { StoreLayout } from './store-layout.js';
import type { AdapterMeta } from './adapters/adapter-files.js';

/** One file of a snapshot, as the hub described it. */
export interface ManifestFile {
  /** Path inside the repo, `/`-separated. */
  path: string;
  /** The blob's name: the LFS sha256, or the git blob sha1 of a small file. */
  etag: string;
  size: number;
  /** Set for LFS files: what the content must hash to. */
  sha256?: string;
}

export interface ManifestSnapshot {
  files: ManifestFile[];
  /** The --include patterns the pull chose files with; empty for the whole repo. */
  include: string[];
  /**
   * Every path of the revision as the hub listed it at the pull, when the
   * pull recorded it: what lets a partial pull be judged complete for an
   * offline start (offline-problem.ts). Absent in older manifests, and then
   * a pull with --include counts as partial.
   */
  repoFiles?: string[];
  /** Every file verified and linked. False while a pull runs, and after one that failed. */
  complete: boolean;
  /** Set when this revision is a LoRA adapter (adapters/adapter-files.ts): its adapter_config.json's base and rank. */
  adapter?: AdapterMeta;
}

/**
 * llmgw's record of one model in the store. A snapshot is complete only once
 * every blob was verified and renamed into place and every link made: the
 * record is written incomplete before the first byte and complete after the
 * last link, so a kill at any point leaves it saying incomplete.
 */
export interface ModelManifest {
  repo: string;
  /** Revision (branch, tag) → the commit it resolved to at the pull. */
  refs: Record<string, string>;
  snapshots: Record<string, ManifestSnapshot>;
  /** Last pull or pin, for LRU eviction. */
  lastUsedMs: number;
  /** 'adapter' when the last pull found a LoRA adapter (adapter_config.json); absent for a model. */
  kind?: 'adapter';
  /** The last pulled adapter revision's base and rank, what `models list` shows. */
  adapter?: AdapterMeta;
}

export async function readManifest(layout: StoreLayout, repo: string): Promise<ModelManifest | undefined> {
  let text: string;
  try {
    text = await readFile(layout.manifestPath(repo), { encoding: 'utf8', flag: READ });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
  return parseManifest(text, repo);
}

/**
 * readManifest with one synchronous read, for a warm's plan: a manifest is
 * a small file whose inode a scan has seen, read in microseconds, and its
 * open, stat, reads and close through libuv's threads were the longest
 * chain of the plan's round trips (issue 52, item 2). O_NONBLOCK: a FIFO
 * put in its place reads as nothing, never hanging the process.
 */
export function readManifestSync(layout: StoreLayout, repo: string): ModelManifest | undefined {
  let text: string;
  try {
    // readFileSync's type says string; it takes open(2)'s flags as a number too, as readFile does.
    text = readFileSync(layout.manifestPath(repo), { encoding: 'utf8', flag: (READ | constants.O_NONBLOCK) as unknown as string });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
  return parseManifest(text, repo);
}

function parseManifest(text: string, repo: string): ModelManifest | undefined {
  try {
    const m = JSON.parse(text) as ModelManifest;
    return m.repo === repo && typeof m.snapshots === 'object' ? m : undefined;
  } catch {
    // A torn or foreign file says nothing reliable: the model counts as not complete.
    return undefined;
  }
}

export async function writeManifest(layout: StoreLayout, manifest: ModelManifest): Promise<void> {
  const path = layout.manifestPath(manifest.repo);
  await makeStoreDir(layout, dirname(path));
  await writeFileAtomic(path, `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
}
