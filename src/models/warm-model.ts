import { readFileSync } from 'node:fs';
import { failure, usageError } from '../lib/errors.js';
import { formatBytes } from '../lib/format-bytes.js';
import { blobFilesOf, pageCacheResidency, warmFiles } from './page-cache.js';
import { isModelWhole, listBlobs } from './scan-store.js';
import { type ModelManifest, readManifestSync } from './model-manifest.js';
import { loaderReads } from './loader-snapshot.js';
import type { StoreLayout } from './store-layout.js';
import { takeWarmTurn } from './warm-gate.js';

/*
 * `llmgw models warm`: a complete model's files read into the host's page
 * cache ahead of need, so its next start reads them at memory speed (issue
 * 41), within a budget of host RAM: by default at most half of MemAvailable,
 * never more than all of it, so what running engines use is not pushed out.
 */

export interface WarmResult {
  repo: string;
  bytes: number;
  budgetBytes: number;
  readBytes: number;
  residentBefore: number;
  residentAfter: number;
  memAvailableBytes: number;
}

/**
 * MemAvailable of /proc/meminfo, in bytes. Read synchronously: the kernel
 * writes the file from its counters, never from a disk, in microseconds,
 * and its open, stat, reads and close through libuv's threads were four
 * round trips on a warm's way to its first read, 2-25 ms on a loaded host
 * (issue 52, item 2).
 */
export function memAvailableBytes(path = '/proc/meminfo'): number {
  const m = /^MemAvailable:\s+(\d+)\s+kB$/m.exec(readFileSync(path, 'utf8'));
  if (!m) throw failure(`${path} has no MemAvailable line: cannot tell how much host RAM a warm may take`);
  return Number(m[1]) * 1024;
}

export interface WarmOptions {
  budgetBytes?: number;
  meminfoPath?: string;
  signal?: AbortSignal;
  onBytes?: (read: number, of: number) => void;
  /** Told once when another process's warm holds the node's turn (warm-gate.ts). */
  onWait?: (holderPid: number | undefined) => void;
  /** Told as each step of the warm ends, for a timeline of where its time goes (bench 14e). */
  onPhase?: (phase: WarmPhase) => void;
}

/** The steps of a warm, in order: the model found complete and its files listed, the node's turn taken, the budget and residency before known, the reads done, residency after. */
export type WarmPhase = 'planned' | 'turn' | 'before' | 'read' | 'after';

/** Warms in progress in this process, by model and budget: another ask of the same joins it (security review 4, F9). */
const inProgress = new Map<string, Promise<WarmResult>>();

/**
 * Reads a complete model into the page cache. One warm at a time on the
 * node (warm-gate.ts); an ask of a model whose warm is in progress in this
 * process, waiting or reading, joins it and gets its result: never two
 * reads of one model at once.
 */
export function warmModel(layout: StoreLayout, repo: string, opts: WarmOptions = {}): Promise<WarmResult> {
  const key = `${layout.repoDir(repo)}\0${opts.budgetBytes ?? ''}\0${opts.meminfoPath ?? ''}`;
  const joined = inProgress.get(key);
  if (joined) return joined;
  const run = warmAlone(layout, repo, opts).finally(() => inProgress.delete(key));
  inProgress.set(key, run);
  return run;
}

async function warmAlone(layout: StoreLayout, repo: string, opts: WarmOptions): Promise<WarmResult> {
  let files = await planWarm(layout, repo);
  opts.onPhase?.('planned');
  const turn = await takeWarmTurn(layout, opts.signal ?? new AbortController().signal, opts.onWait);
  try {
    // Another warm held the turn, for minutes maybe: a pull or an eviction may have changed the model meanwhile.
    if (turn.waited) files = await planWarm(layout, repo);
    opts.onPhase?.('turn');
    return await warmHoldingTurn(repo, files, opts);
  } finally {
    turn.release();
  }
}

/**
 * The model found complete, and its files in the order a warm reads them.
 * Its manifest read once (synchronously: readManifestSync) and its blobs
 * listed once (a readdir and an lstat each), from which the completeness,
 * the files and their sizes are all judged, the checks side by side, as
 * none needs another's answer: each
 * listing the folder and stat-ing every blob and link again, they were 10
 * of a warm's 70 ms for a 128 MiB model from a fast disk (issue 52, item 2).
 */
async function planWarm(layout: StoreLayout, repo: string): Promise<{ path: string; bytes: number }[]> {
  // The listing's calls go to libuv's threads first; the manifest is read meanwhile (its refusal leaves the listing's unheard).
  const listed = listBlobs(layout.repoDir(repo));
  listed.catch(() => undefined);
  const manifest = readManifestSync(layout, repo);
  const listing = await listed;
  const [whole, files] = await Promise.all([isModelWhole(layout, manifest, listing), loaderFilesFirst(layout, repo, blobFilesOf(listing), manifest)]);
  if (!whole) {
    throw failure(`${repo} is not complete in the store (llmgw models list): pull it first with llmgw models pull ${repo}`);
  }
  return files;
}

/**
 * The warm itself, the node's turn held: its budget is read now, after any
 * warm before it, then the residency before.
 */
async function warmHoldingTurn(repo: string, files: readonly { path: string; bytes: number }[], opts: WarmOptions): Promise<WarmResult> {
  const paths = files.map((f) => f.path);
  const bytes = files.reduce((s, f) => s + f.bytes, 0);
  const available = memAvailableBytes(opts.meminfoPath);
  if (opts.budgetBytes !== undefined && opts.budgetBytes > available) {
    throw usageError(`--budget ${formatBytes(opts.budgetBytes)} is more than the host's MemAvailable (${formatBytes(available)}): a warm would push out what running engines use; give at most that`);
  }
  const budgetBytes = Math.min(bytes, opts.budgetBytes ?? Math.floor(available / 2));
  const before = await pageCacheResidency(paths, opts.signal);
  opts.onPhase?.('before');
  const readBytes = await warmFiles(files, budgetBytes, { signal: opts.signal, onBytes: (n) => opts.onBytes?.(n, budgetBytes) });
  opts.onPhase?.('read');
  const after = await pageCacheResidency(paths, opts.signal);
  opts.onPhase?.('after');
  return { repo, bytes, budgetBytes, readBytes, residentBefore: before.residentBytes, residentAfter: after.residentBytes, memAvailableBytes: available };
}

/**
 * The model's blobs with those the engines' loaders read at each pulled
 * revision first (loader-files.ts; review engine-fidelity-3 E11): a budget
 * smaller than the model is spent on the indexed safetensors, not on .bin
 * twins or original/ that vLLM and SGLang skip. `manifest` is the model's,
 * as its caller read it.
 */
export async function loaderFilesFirst<F extends { path: string }>(layout: StoreLayout, repo: string, files: readonly F[], manifest: ModelManifest | undefined): Promise<F[]> {
  const first = new Set<string>();
  if (manifest) {
    const commits = [...new Set(Object.values(manifest.refs))];
    for (const s of await Promise.all(commits.map((commit) => loaderReads(layout, manifest, commit, 'any')))) {
      for (const f of s?.present ?? []) first.add(layout.blobPath(repo, f.etag));
    }
  }
  return [...files.filter((f) => first.has(f.path)), ...files.filter((f) => !first.has(f.path))];
}
