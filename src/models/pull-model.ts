import { TurnQueue } from '../lib/turn-queue.js';
import { lstat, open, readlink, rename, symlink, unlink } from 'node:fs/promises';
import { READ, READ_STREAM, makeStoreDir, openStoreFile, storeFileSize } from './store-files.js';
import { constants, createReadStream } from 'node:fs';
import { createHash } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { formatBytes } from '../lib/format-bytes.js';
import { failure, usageError } from '../lib/errors.js';
import { writeFileAtomic } from '../lib/write-file-atomic.js';
import type { BandwidthLimiter } from './bandwidth-limiter.js';
import { chooseEvictions } from './choose-evictions.js';
import { compileCacheBytes } from './compile-cache-bytes.js';
import { engineCachesOverBound, surveyEngineCaches } from './engine-cache-survey.js';
import type { ConcurrencyLimit } from './concurrency-limit.js';
import { SMALL_BLOB_BYTES } from './blob-to-fetch.js';
import { downloadBlob } from './download-blob.js';
import { type HubFile, type HubOptions, fetchRevision, hubHeaders, resolveUrl } from './hub-client.js';
import { includeMatcher } from './match-include.js';
import { filterYielding } from './filter-yielding.js';
import { type ManifestFile, type ModelManifest, readManifest, writeManifest } from './model-manifest.js';
import { lockModel } from './model-lock.js';
import { startHashThreadEarly } from './hash-thread.js';
import { removeModel } from './remove-model.js';
import { checkRepoId, checkRevision } from './repo-id.js';
import { scanStore } from './scan-store.js';
import type { StoreLayout } from './store-layout.js';
import type { AdapterMeta } from './adapters/adapter-files.js';
import { planAdapterPull, readAdapterMeta } from './adapters/adapter-pull.js';

export interface PullRequest {
  repo: string;
  /** Branch, tag or commit; main by default. */
  revision: string;
  /** fnmatch patterns (match-include.ts); the whole repo when empty. */
  include: readonly string[];
  /** Hash blobs already in the store again, deleting any that no longer match. */
  verify?: boolean;
}

export interface PullContext {
  layout: StoreLayout;
  hub: HubOptions;
  /** models.budget, bytes. */
  budget: number;
  /** Shared by every pull of the process (models.max_concurrent). */
  concurrency: ConcurrencyLimit;
  /** Shared by every pull of the process (models.bandwidth). */
  limiter: BandwidthLimiter;
  signal: AbortSignal;
  onEvent?: (e: PullEvent) => void;
  /**
   * The pull shares its event loop with work that must answer on time: the
   * agent's, with its health probes, heartbeats and admin socket. Its one
   * stream from a near hub is then read in the pool's blocks and written
   * through libuv's pool (BlobWriter.stream), never hashed and written in
   * place (streamInPlace), which holds the loop for a whole poll's reads.
   * False for `llmgw models pull`, which owns its process.
   */
  sharedLoop?: boolean;
}

export type PullEvent =
  /** Another process is pulling this model; this pull waits for it, then fetches only what is still missing. */
  | { kind: 'waiting'; holderPid: number | undefined }
  | { kind: 'plan'; commit: string; files: number; bytes: number; fetchFiles: number; fetchBytes: number }
  | { kind: 'evicted'; repo: string; bytes: number }
  | { kind: 'file-start'; path: string; size: number }
  | { kind: 'file-progress'; path: string; bytes: number; size: number }
  | { kind: 'file-done'; path: string; size: number; fetched: number; resumedFrom: number; mismatches: number };

export interface PullResult {
  repo: string;
  revision: string;
  commit: string;
  /** Files of the snapshot. */
  files: number;
  bytes: number;
  /** Bytes fetched by this pull (0 when everything was there). */
  fetchedBytes: number;
  /** Bytes partial files of a killed pull held, continued with Range requests. */
  resumedBytes: number;
  /** Downloads refused for a digest mismatch and fetched again. */
  mismatches: number;
  evicted: string[];
  /** What an engine is given as the model (the snapshot folder). */
  snapshotPath: string;
  /** Set when the repo is a LoRA adapter (adapters/adapter-files.ts): its base model and rank; `models pull` adds its content digest. */
  adapter?: AdapterMeta & { digest?: string };
}

interface PlannedBlob {
  file: HubFile;
  etag: string;
}

/**
 * Pulls a model into the store: resolves the revision with the hub, evicts
 * least recently used unpinned models if the budget needs room, fetches the
 * missing blobs (resumed, verified: download-blob.ts), links the snapshot
 * and records the model complete. One pull per model at a time, in this
 * process and across processes (model-lock.ts); a second one waits and then
 * finds the blobs there.
 */
export async function pullModel(req: PullRequest, ctx: PullContext): Promise<PullResult> {
  const repo = checkRepoId(req.repo);
  const revision = checkRevision(req.revision);
  const matches = includeMatcher(req.include);
  const { layout, signal } = ctx;
  // A pull that owns its loop reads one stream in place and hashes it on a thread (download-blob.ts): started now.
  if (ctx.sharedLoop !== true && !ctx.limiter.limited) startHashThreadEarly();
  // The store's whole entries are judged where it is opened (the agent's start, loadModelStore); its path, and each
  // folder a pull writes in, here at every pull: a store removed and made again by a local user is refused (F3).
  await makeStoreDir(layout, layout.hubDir);
  // The hub is asked while the lock is taken (its first use loads libc, 10-35 ms in bench 14b's set-up); a pull that
  // waited for another holder asks again, as what the hub said before the wait may be old.
  const early = fetchRevision(ctx.hub, repo, revision, signal);
  early.catch(() => {});
  const lock = await lockModel(layout, repo, signal, (holderPid) => ctx.onEvent?.({ kind: 'waiting', holderPid }));
  let releaseTurn: (() => void) | undefined;
  try {
    const rev = lock.waited ? await fetchRevision(ctx.hub, repo, revision, signal) : await early;
    // In slices: the worst patterns against a long listing held the loop for seconds (filter-yielding.ts).
    const files = await filterYielding(rev.files, (f) => matches(f.path), signal);
    if (files.length === 0) {
      throw usageError(`no file of ${repo}@${revision} matches --include ${req.include.join(' ')}; the repo has ${rev.files.length} files`);
    }
    // An adapter missing what the LoRA loaders read is refused on the listing, before a byte is written.
    const adapter = planAdapterPull(repo, revision, rev.files, files);
    const blobs = new Map<string, PlannedBlob>();
    for (const file of files) blobs.set(file.sha256 ?? file.blobId, { file, etag: file.sha256 ?? file.blobId });
    const bytes = [...blobs.values()].reduce((s, b) => s + b.file.size, 0);
    // Sizes from the hub's listing: what can never fit is refused before the store is touched (no eviction, no byte).
    if (bytes > ctx.budget) {
      throw failure(`${repo}@${revision} is ${formatBytes(bytes)}${adapter ? ' (a LoRA adapter)' : ''}, more than all of models.budget (${formatBytes(ctx.budget)}): it can never fit, nothing was fetched or evicted; raise models.budget`);
    }

    const missing: PlannedBlob[] = [];
    for (const b of blobs.values()) {
      if (!(await blobPresent(layout, repo, b, req.verify === true))) missing.push(b);
    }
    let needBytes = 0;
    for (const b of missing) needBytes += Math.max(0, b.file.size - (await sizeOrZero(layout.incompletePath(repo, b.etag))));
    ctx.onEvent?.({ kind: 'plan', commit: rev.commit, files: files.length, bytes, fetchFiles: missing.length, fetchBytes: missing.reduce((s, b) => s + b.file.size, 0) });

    // One pull at a time plans and fills the budget (security review 3, S10): three pulls at once each found
    // room in the same scan, and a 10 MiB budget held 14. Pulls that need no byte do not wait.
    releaseTurn = needBytes > 0 ? await budgetTurns.take(layout.cacheDir, signal) : undefined;
    const evicted = await makeRoom(ctx, repo, needBytes);

    const manifestFiles: ManifestFile[] = files.map((f) => ({ path: f.path, etag: f.sha256 ?? f.blobId, size: f.size, ...(f.sha256 ? { sha256: f.sha256 } : {}) }));
    const manifest: ModelManifest = (await readManifest(layout, repo)) ?? { repo, refs: {}, snapshots: {}, lastUsedMs: Date.now() };
    // A narrower --include after a wider pull of the same commit keeps what that pull made complete.
    const before = manifest.snapshots[rev.commit];
    const kept = before?.complete ? before.files.filter((f) => !manifestFiles.some((n) => n.path === f.path)) : [];
    const include = before?.complete && (before.include.length === 0 || req.include.length === 0) ? [] : [...new Set([...(before?.complete ? before.include : []), ...req.include])];
    // In code-unit order, not localeCompare's: its first call builds ICU's collator, 18 ms of the main thread in the
    // set-up of bench 14b's pull, for an order no reader relies on beyond its being the same each time (issue 52, item 1).
    const snapshotFiles = [...kept, ...manifestFiles].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    manifest.snapshots[rev.commit] = { files: snapshotFiles, include, complete: false, repoFiles: rev.files.map((f) => f.path) };
    if (adapter) manifest.kind = 'adapter';
    else delete manifest.kind;
    // Written (and its folders made) beside the first downloads' connects and answers' heads, which need none of it;
    // each download waits for it before it writes anything to the store (DownloadContext.storeReady), so the record
    // still says incomplete before the first byte. Its two fsyncs were 13 ms of the 45 ms bench 14b's pull took
    // before its first GET, more when other work writes to the disk (issue 52, item 1).
    const storeReady = Promise.all([
      writeManifest(layout, structuredClone(manifest)),
      makeStoreDir(layout, dirname(layout.blobPath(repo, 'x'))),
      makeStoreDir(layout, partialDir(layout)),
    ]).then(() => {});
    storeReady.catch(() => {});
    // An adapter's config first: one the engines would refuse stops the pull before its weights are fetched.
    const configEtag = adapter && (adapter.config.sha256 ?? adapter.config.blobId);
    const configFirst = configEtag ? await downloadAll(ctx, repo, rev.commit, missing.filter((b) => b.etag === configEtag), storeReady) : { fetchedBytes: 0, resumedBytes: 0, mismatches: 0, unsynced: [] };
    const meta = configEtag ? await readAdapterMeta(layout, repo, revision, configEtag) : undefined;
    const rest = await downloadAll(ctx, repo, rev.commit, missing.filter((b) => b.etag !== configEtag), storeReady);
    // Written before the snapshot is linked and the record is written complete (and failed here if it could not be).
    await storeReady;
    const outcome = {
      fetchedBytes: configFirst.fetchedBytes + rest.fetchedBytes,
      resumedBytes: configFirst.resumedBytes + rest.resumedBytes,
      mismatches: configFirst.mismatches + rest.mismatches,
      unsynced: [...configFirst.unsynced, ...rest.unsynced],
    };
    await linkPointers(layout, repo, rev.commit, manifestFiles);
    // Durable before the manifest calls the model complete, all at once (the kernel writes them back together):
    // the small blobs, renamed unsynced; the folders the blobs were renamed and the links made in; the ref.
    const folders = new Set([dirname(layout.blobPath(repo, 'x')), ...manifestFiles.map((f) => dirname(layout.pointerPath(repo, rev.commit, f.path)))]);
    await Promise.all([
      syncAll(outcome.unsynced),
      ...[...folders].map(syncFolder),
      (async () => {
        if (revision === rev.commit) return;
        const ref = layout.refPath(repo, revision);
        await makeStoreDir(layout, dirname(ref));
        await writeFileAtomic(ref, rev.commit, 0o644);
      })(),
    ]);
    manifest.refs[revision] = rev.commit;
    // The manifest records base and rank; the config's other fields are read again at each resolve.
    const recorded = meta ? { baseModel: meta.baseModel, rank: meta.rank } : undefined;
    manifest.snapshots[rev.commit] = { files: snapshotFiles, include, complete: true, repoFiles: rev.files.map((f) => f.path), ...(recorded ? { adapter: recorded } : {}) };
    if (recorded) manifest.adapter = recorded;
    else delete manifest.adapter;
    manifest.lastUsedMs = Date.now();
    await writeManifest(layout, manifest);
    return {
      repo,
      revision,
      commit: rev.commit,
      files: files.length,
      bytes,
      fetchedBytes: outcome.fetchedBytes,
      resumedBytes: outcome.resumedBytes,
      mismatches: outcome.mismatches,
      evicted,
      snapshotPath: layout.snapshotDir(repo, rev.commit),
      ...(meta ? { adapter: meta } : {}),
    };
  } finally {
    releaseTurn?.();
    lock.release();
  }
}

/**
 * The pull whose turn it is to plan against the budget and fill it, per
 * store, in this process. A pull in another process (`llmgw models pull`
 * beside the agent) is not counted here.
 */
const budgetTurns = new TurnQueue();

async function sizeOrZero(path: string): Promise<number> {
  return storeFileSize(path);
}

/** Where ranged downloads record their contiguous prefix (download-blob.ts): llmgw's own folder, not the repo's. */
function partialDir(layout: StoreLayout): string {
  return join(layout.ownDir, 'partial');
}

/** Opens and syncs each file, all at once: the kernel writes them back together. */
async function syncAll(paths: readonly string[]): Promise<void> {
  await Promise.all(
    paths.map(async (path) => {
      const fh = await openStoreFile(path, READ);
      try {
        await fh.datasync();
      } finally {
        await fh.close();
      }
    }),
  );
}

/**
 * A blob already in place at its size (and, with verify, its digest); one
 * that is not is deleted. A small blob's digest is checked every time: it
 * was renamed before it was synced (blob-to-fetch.ts SMALL_BLOB_BYTES), so
 * after a crash its name may stand at its size over bytes never written.
 */
async function blobPresent(layout: StoreLayout, repo: string, b: PlannedBlob, verify: boolean): Promise<boolean> {
  const path = layout.blobPath(repo, b.etag);
  const s = await lstat(path).catch(() => undefined);
  if (s === undefined) return false;
  if (!s.isFile() || s.size !== b.file.size) {
    await unlink(path).catch(() => {});
    return false;
  }
  if (!verify && b.file.size >= SMALL_BLOB_BYTES) return true;
  const hash = b.file.sha256 ? createHash('sha256') : createHash('sha1').update(`blob ${b.file.size}\0`);
  for await (const chunk of createReadStream(path, { flags: READ_STREAM })) hash.update(chunk as Buffer);
  if (hash.digest('hex') === b.etag) return true;
  // Rotten on disk: never served again, fetched anew.
  await unlink(path).catch(() => {});
  return false;
}

async function makeRoom(ctx: PullContext, repo: string, needBytes: number): Promise<string[]> {
  const models = await scanStore(ctx.layout);
  // The compile caches take their part of the budget first: those of a model evicted go with it, but none is counted on to.
  const survey = await surveyEngineCaches(ctx.layout);
  const compiled = await compileCacheBytes(ctx.layout, ctx.budget, survey);
  const plan = chooseEvictions(models, needBytes, ctx.budget - compiled, repo);
  if (!plan.fits) {
    const held = models.filter((m) => m.repo !== repo && (m.pins.length > 0 || m.pulling)).map((m) => m.repo);
    const over = engineCachesOverBound(survey, ctx.budget) ? `, counted up to their share of the budget (they hold ${survey.capped ? 'more than a survey reads' : formatBytes(survey.bytes)})` : '';
    const compileNote = compiled > 0 ? ` and the compile caches ${formatBytes(compiled)} (${ctx.layout.engineCachesDir}, removed with their model${over})` : '';
    throw failure(
      `${repo} needs ${formatBytes(needBytes)} more and models.budget is ${formatBytes(ctx.budget)}: even with every unpinned model evicted the models would hold ${formatBytes(plan.bytesAfter)}${compileNote}${held.length ? ` (in use: ${held.join(', ')})` : ''}; raise models.budget or remove a model`,
    );
  }
  const evicted: string[] = [];
  for (const m of plan.evict) {
    const r = await removeModel(ctx.layout, m.repo);
    if (!r.removed) throw failure(`cannot evict ${m.repo} to make room for ${repo}: ${r.reason}; try again`);
    evicted.push(m.repo);
    ctx.onEvent?.({ kind: 'evicted', repo: m.repo, bytes: m.bytes });
  }
  return evicted;
}

async function downloadAll(
  ctx: PullContext,
  repo: string,
  commit: string,
  missing: PlannedBlob[],
  storeReady: Promise<void>,
): Promise<{ fetchedBytes: number; resumedBytes: number; mismatches: number; unsynced: string[] }> {
  const headers = await hubHeaders(ctx.hub);
  const unsynced: string[] = [];
  // The first failure ends the other downloads of this pull (their partial files stay for the next one).
  const local = new AbortController();
  const signal = AbortSignal.any([ctx.signal, local.signal]);
  let fetchedBytes = 0;
  let resumedBytes = 0;
  let mismatches = 0;
  let first: unknown;
  await Promise.all(
    missing.map((b) =>
      ctx.concurrency
        .run(async () => {
          signal.throwIfAborted();
          ctx.onEvent?.({ kind: 'file-start', path: b.file.path, size: b.file.size });
          const r = await downloadBlob(
            {
              path: b.file.path,
              url: resolveUrl(ctx.hub.endpoint, repo, commit, b.file.path),
              size: b.file.size,
              sha256: b.file.sha256,
              blobId: b.file.blobId,
              incompletePath: ctx.layout.incompletePath(repo, b.etag),
              blobPath: ctx.layout.blobPath(repo, b.etag),
              prefixPath: join(partialDir(ctx.layout), `${basename(ctx.layout.repoDir(repo))}.${b.etag}`),
            },
            {
              headers,
              limiter: ctx.limiter,
              signal,
              redirectHosts: ctx.hub.redirectHosts,
              storeReady,
              sharedLoop: ctx.sharedLoop,
              onProgress: (p) => ctx.onEvent?.({ kind: 'file-progress', path: b.file.path, bytes: p.bytes, size: b.file.size }),
            },
          );
          if (!r.synced) unsynced.push(ctx.layout.blobPath(repo, b.etag));
          fetchedBytes += r.fetched;
          resumedBytes += r.resumedFrom;
          mismatches += r.mismatches;
          ctx.onEvent?.({ kind: 'file-done', path: b.file.path, size: b.file.size, fetched: r.fetched, resumedFrom: r.resumedFrom, mismatches: r.mismatches });
        })
        .catch((err: unknown) => {
          first ??= err;
          local.abort(err);
        }),
    ),
  );
  if (first !== undefined) {
    ctx.signal.throwIfAborted();
    throw first;
  }
  return { fetchedBytes, resumedBytes, mismatches, unsynced };
}

/** Each file's link, its folders made (and judged) once each, the links at once. */
async function linkPointers(layout: StoreLayout, repo: string, commit: string, files: readonly ManifestFile[]): Promise<void> {
  for (const dir of new Set(files.map((f) => dirname(layout.pointerPath(repo, commit, f.path))))) await makeStoreDir(layout, dir);
  await Promise.all(files.map((f) => linkPointer(layout, repo, commit, f)));
}

/** A folder's entries (renames, links) made durable. */
async function syncFolder(dir: string): Promise<void> {
  const fh = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** snapshots/<commit>/<file> → the blob, relative as huggingface_hub links it; replaced if it points elsewhere. Its folder is made. */
async function linkPointer(layout: StoreLayout, repo: string, commit: string, f: ManifestFile): Promise<void> {
  const pointer = layout.pointerPath(repo, commit, f.path);
  const target = layout.pointerTarget(repo, commit, f.path, f.etag);
  const current = await readlink(pointer).catch(() => undefined);
  if (current === target) return;
  const tmp = `${pointer}.tmp-${process.pid}`;
  await unlink(tmp).catch(() => {});
  await symlink(target, tmp);
  await rename(tmp, pointer);
}
