import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, open, rename, stat, truncate, unlink } from 'node:fs/promises';
import { isNotFound } from '../lib/errno.js';
import { failure } from '../lib/errors.js';
import type { BandwidthLimiter } from './bandwidth-limiter.js';
import { describeFetchError } from './hub-client.js';

export interface BlobToFetch {
  /** Repo path, for messages. */
  path: string;
  url: string;
  size: number;
  /** LFS sha256 to verify against; without it, the git blob sha1 `blobId`. */
  sha256?: string;
  blobId: string;
  /** Where the bytes go while they arrive, kept across a kill to resume from. */
  incompletePath: string;
  /** Where the verified blob is renamed to. */
  blobPath: string;
}

export interface DownloadProgress {
  /** Bytes of this file on disk so far. */
  bytes: number;
}

export interface DownloadOutcome {
  /** Bytes a killed earlier download had left, which a Range request continued from. */
  resumedFrom: number;
  /** Bytes fetched this time. */
  fetched: number;
  /** Attempts refused for a digest mismatch (each deleted and fetched again). */
  mismatches: number;
}

export interface DownloadContext {
  headers: Record<string, string>;
  limiter: BandwidthLimiter;
  signal: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
}

/** Attempts per file: a byte flipped on the way is refused and fetched once more, from the start. */
export const DOWNLOAD_ATTEMPTS = 2;

/**
 * Fetches one blob, resuming a `.incomplete` file a killed pull left with a
 * `Range` request, and renames it into place only when its digest is the
 * hub's: sha256 for LFS files, the git blob sha1 (`blob <size>\0<bytes>`)
 * for the rest. A mismatch deletes the partial file, so a corrupt byte is
 * never served nor resumed from; the caller must hold the model's lock, as
 * two writers to one `.incomplete` would interleave.
 *
 * @huggingface/hub's downloadFileToCacheDir is not used: it writes the
 * `.incomplete` file afresh (no Range resume) and renames it without
 * checking any digest (packages/hub/src/lib/download-file-to-cache-dir.ts).
 */
export async function downloadBlob(blob: BlobToFetch, ctx: DownloadContext): Promise<DownloadOutcome> {
  let mismatches = 0;
  let resumedFrom = 0;
  let fetched = 0;
  for (let attempt = 1; ; attempt++) {
    const r = await downloadOnce(blob, ctx);
    if (attempt === 1) resumedFrom = r.resumedFrom;
    fetched += r.fetched;
    if (r.digest === expectedDigest(blob)) {
      await chmod(blob.incompletePath, 0o644);
      await rename(blob.incompletePath, blob.blobPath);
      return { resumedFrom, fetched, mismatches };
    }
    mismatches++;
    await unlink(blob.incompletePath).catch(() => {});
    if (attempt >= DOWNLOAD_ATTEMPTS) {
      throw failure(
        `${blob.path}: the bytes the hub sent hash to ${r.digest}, not ${expectedDigest(blob)}, ${attempt} times; the file was deleted and is not served; check the hub or mirror at ${new URL(blob.url).origin}`,
      );
    }
  }
}

function expectedDigest(blob: BlobToFetch): string {
  return blob.sha256 ?? blob.blobId;
}

function newHash(blob: BlobToFetch): Hash {
  if (blob.sha256 !== undefined) return createHash('sha256');
  // The git object id of a small file: what the hub's blobId and the cache's blob name are.
  return createHash('sha1').update(`blob ${blob.size}\0`);
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if (isNotFound(err)) return 0;
    throw err;
  }
}

async function hashFile(path: string, hash: Hash, signal: AbortSignal): Promise<void> {
  for await (const chunk of createReadStream(path, { signal })) hash.update(chunk as Buffer);
}

async function downloadOnce(blob: BlobToFetch, ctx: DownloadContext): Promise<{ digest: string; resumedFrom: number; fetched: number }> {
  let have = await sizeOf(blob.incompletePath);
  if (have > blob.size) {
    // Longer than the file can be: not a prefix of it.
    await truncate(blob.incompletePath, 0);
    have = 0;
  }
  let hash = newHash(blob);
  if (have > 0) await hashFile(blob.incompletePath, hash, ctx.signal);
  const resumedFrom = have;
  if (have === blob.size) {
    return { digest: hash.digest('hex'), resumedFrom, fetched: 0 };
  }

  const headers: Record<string, string> = { ...ctx.headers, 'accept-encoding': 'identity' };
  if (have > 0) headers.range = `bytes=${have}-`;
  let res: Response;
  try {
    res = await fetch(blob.url, { headers, signal: ctx.signal, redirect: 'follow' });
  } catch (err) {
    ctx.signal.throwIfAborted();
    throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${describeFetchError(err)}`, { cause: err });
  }
  if (have > 0 && res.status === 206 && !contentRangeStartsAt(res.headers.get('content-range'), have)) {
    await res.body?.cancel();
    throw failure(`${blob.path}: the hub answered a request for bytes ${have}- with ${res.headers.get('content-range')}; try again`);
  }
  if (res.status === 200 && have > 0) {
    // The server ignored Range (huggingface_hub meets this behind some CDNs): start over.
    await truncate(blob.incompletePath, 0);
    have = 0;
    hash = newHash(blob);
  } else if (res.status !== 200 && res.status !== 206) {
    await res.body?.cancel();
    throw failure(`${blob.path}: the hub answered HTTP ${res.status}${res.status === 401 || res.status === 403 ? '; set models.hub.token_file to a token that may read it' : ''}`);
  }
  if (!res.body) throw failure(`${blob.path}: the hub sent no body`);

  const fh = await open(blob.incompletePath, have > 0 ? 'a' : 'w', 0o600);
  let fetched = 0;
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      if (have + chunk.byteLength > blob.size) {
        throw failure(`${blob.path}: the hub sent more than the ${blob.size} bytes it listed`);
      }
      await ctx.limiter.take(chunk.byteLength, ctx.signal);
      await fh.write(chunk);
      hash.update(chunk);
      have += chunk.byteLength;
      fetched += chunk.byteLength;
      ctx.onProgress?.({ bytes: have });
    }
    await fh.sync();
  } catch (err) {
    ctx.signal.throwIfAborted();
    if (err instanceof Error && err.name === 'LlmgwError') throw err;
    // The bytes written so far stay: the next pull resumes from them.
    throw failure(`${blob.path}: the download broke off at byte ${have} of ${blob.size}: ${describeFetchError(err)}; pull again to resume`, { cause: err });
  } finally {
    await fh.close();
  }
  if (have !== blob.size) {
    throw failure(`${blob.path}: the hub sent ${have} of ${blob.size} bytes; pull again to resume`);
  }
  return { digest: hash.digest('hex'), resumedFrom, fetched };
}

function contentRangeStartsAt(header: string | null, start: number): boolean {
  const m = header === null ? null : /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(header.trim());
  return m !== null && Number(m[1]) === start;
}
