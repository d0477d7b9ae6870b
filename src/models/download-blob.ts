import { readFile, rename, unlink } from 'node:fs/promises';
import { CREATE_TRUNCATE, READ, READ_WRITE, chmodStoreFile, openStoreFile, storeFileSize, truncateStoreFile } from './store-files.js';
import { isNotFound } from '../lib/errno.js';
import { failure } from '../lib/errors.js';
import { type FileHash, InlineHash, expectedDigest, fileHash, hashFile, newHash } from './blob-digest.js';
import { type BlobToFetch, type DownloadContext, NEAR_RTT_MS, PART_BYTES, RANGED_MIN_BYTES, SMALL_BLOB_BYTES } from './blob-to-fetch.js';
import { BlobWriter } from './blob-writer.js';
import { hostIdentity } from './address-class.js';
import { contentRangeIs } from './content-range.js';
import { fetchParts } from './fetch-parts.js';
import { fetchStream } from './fetch-stream.js';
import { describeFetchError } from './hub-client.js';
import { type HubStream, openHubStream } from './hub-stream.js';

export interface DownloadOutcome {
  /** Bytes a killed earlier download had left, which a Range request continued from. */
  resumedFrom: number;
  /** Bytes fetched this time. */
  fetched: number;
  /** Attempts refused for a digest mismatch (each deleted and fetched again). */
  mismatches: number;
  /** Synced before its rename; a small blob is not, and its pull syncs it (SMALL_BLOB_BYTES). */
  synced: boolean;
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
      await chmodStoreFile(blob.incompletePath, 0o644);
      await rename(blob.incompletePath, blob.blobPath);
      return { resumedFrom, fetched, mismatches, synced: blob.size >= SMALL_BLOB_BYTES };
    }
    mismatches++;
    await unlink(blob.incompletePath).catch(() => {});
    if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
    if (attempt >= DOWNLOAD_ATTEMPTS) {
      throw failure(
        `${blob.path}: the bytes the hub sent hash to ${r.digest}, not ${expectedDigest(blob)}, ${attempt} times; the file was deleted and is not served; check the hub or mirror at ${new URL(blob.url).origin}`,
      );
    }
  }
}

/** 0 when missing; a link or anything but a regular file planted as the `.incomplete` is refused, never followed (F3). */
const sizeOf = storeFileSize;

/**
 * Where a download goes on from: the partial file's size, cut back to the
 * prefix a ranged download recorded (its parts ahead of that may have holes
 * after a crash), or to nothing when it is longer than the file can be.
 */
async function resumePoint(blob: BlobToFetch): Promise<number> {
  let have = await sizeOf(blob.incompletePath);
  const recorded = blob.prefixPath === undefined ? undefined : await readPrefix(blob.prefixPath);
  if (recorded !== undefined && recorded < have) {
    await truncateStoreFile(blob.incompletePath, recorded);
    have = recorded;
  }
  if (have > blob.size) {
    // Longer than the file can be: not a prefix of it.
    await truncateStoreFile(blob.incompletePath, 0);
    have = 0;
  }
  return have;
}

async function readPrefix(path: string): Promise<number | undefined> {
  try {
    const text = (await readFile(path, { encoding: 'utf8', flag: READ })).trim();
    // Anything else (a torn write) counts as nothing kept: the download starts over, never trusts a hole.
    return /^\d{1,15}$/.test(text) ? Number(text) : 0;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

async function downloadOnce(blob: BlobToFetch, ctx: DownloadContext): Promise<{ digest: string; resumedFrom: number; fetched: number }> {
  // A partial file may be cut back (resumePoint) or synced: only once the store may be written. A fresh file waits
  // below, after the request's head, so that its connect goes beside what the pull writes first.
  if ((await sizeOf(blob.incompletePath)) > 0) await ctx.storeReady;
  let have = await resumePoint(blob);
  const resumedFrom = have;
  if (have === blob.size) {
    const hash = newHash(blob);
    await hashFile(blob.incompletePath, hash, have, ctx.signal);
    await syncIfLarge(blob);
    return { digest: hash.digest('hex'), resumedFrom, fetched: 0 };
  }

  const partBytes = ctx.partBytes ?? PART_BYTES;
  const mayRange = blob.prefixPath !== undefined && blob.size - have >= (RANGED_MIN_BYTES / PART_BYTES) * partBytes;
  const firstEnd = Math.min(blob.size, have + partBytes);
  const headers: Record<string, string> = { ...ctx.headers, 'accept-encoding': 'identity' };
  if (!mayRange && have > 0) headers.range = `bytes=${have}-`;
  // Parts only from a far server, judged by the connect of the host that answers (NEAR_RTT_MS): a near one sends
  // the rest in one stream, in order, which the hash follows as it comes and the writer keeps a plain prefix of.
  const choice = { ranged: false };
  const headersAt = mayRange
    ? (connectMs: number | undefined, remoteAddress: string | undefined): Record<string, string> => {
        choice.ranged = !isNear(connectMs, remoteAddress, ctx.nearRttMs ?? NEAR_RTT_MS);
        if (choice.ranged) return { range: `bytes=${have}-${firstEnd - 1}` };
        return have > 0 ? { range: `bytes=${have}-` } : {};
      }
    : undefined;
  let first: HubStream;
  try {
    first = await openHubStream(blob.url, { headers, signal: ctx.signal, redirectHosts: ctx.redirectHosts, headersAt });
  } catch (err) {
    ctx.signal.throwIfAborted();
    throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${describeFetchError(err)}`, { cause: err });
  }
  const ranged = choice.ranged;
  if (first.status === 206 && !contentRangeIs(first.headers.get('content-range'), have, ranged ? firstEnd : undefined, blob.size)) {
    first.cancel();
    throw failure(`${blob.path}: the hub answered a request for bytes ${have}- with ${first.headers.get('content-range')}; try again`);
  }
  if (first.status === 200 && have > 0) {
    // The server ignored Range (huggingface_hub meets this behind some CDNs): start over.
    await truncateStoreFile(blob.incompletePath, 0);
    have = 0;
  } else if (first.status !== 200 && first.status !== 206) {
    first.cancel();
    throw failure(`${blob.path}: the hub answered HTTP ${first.status}${first.status === 401 || first.status === 403 ? '; set models.hub.token_file to a token that may read it' : ''}`);
  }
  try {
    await ctx.storeReady;
  } catch (err) {
    first.cancel();
    throw err;
  }
  if (first.chunked) {
    // Not a file server's answer for a file; read the slow way rather than not at all.
    first.cancel();
    const hash = newHash(blob);
    await hashFile(blob.incompletePath, hash, have, ctx.signal);
    return fetchStream(blob, ctx, have, hash, resumedFrom, first.url);
  }

  // In place unless models.bandwidth is set or the loop is shared (below).
  const inPlace = !(ctx.limiter.limited || ctx.sharedLoop === true);
  // w+, not w: the hash reads the file back through this descriptor.
  const fh = await openStoreFile(blob.incompletePath, have > 0 ? READ_WRITE : CREATE_TRUNCATE, 0o600);
  let hash: FileHash;
  try {
    // Ranged parts come out of order, and a hash thread reads what they wrote from the file. So does one stream
    // read in place: on the thread that reads every socket the sha256 was a third of its CPU, and that thread
    // is what bounds a pull from a near server (bench 14b's main thread 270-290 ms of CPU per 128 MiB with
    // the hash, 160-230 without it, the hash thread reading back from the page cache on another core; issue
    // 52, item 1). One stream read in blocks (a shared loop, a bandwidth limit) is hashed as it comes, here.
    if ((first.status === 206 && ranged) || (inPlace && blob.size >= SMALL_BLOB_BYTES)) hash = fileHash(blob, fh);
    else {
      const inline = new InlineHash(blob, fh);
      await inline.prefix(have);
      hash = inline;
    }
  } catch (err) {
    first.cancel();
    await fh.close();
    throw err;
  }
  // The kept prefix is hashed from the file with the rest (a thread's hash; an inline one has read it).
  hash.advance(have);
  const writer = new BlobWriter(blob, fh, hash, have, ctx);
  let digest: string;
  try {
    if (first.status === 206 && ranged) {
      await writer.recordPrefix();
      await fetchParts(blob, ctx, writer, first, have, firstEnd);
    } else {
      // One stream: the file stays a plain prefix, whatever a ranged attempt recorded before.
      if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
      // In place unless models.bandwidth is set (its limiter is waited for between writes, which a read in place does
      // not) or the loop is shared: libuv reads a readable socket up to 32 times in one poll, and each read in place
      // is a megabyte's synchronous write (and its sha256, then), so the agent's loop was held for a whole turn of up to 32 MiB:
      // over a second at load 10-20 on two cores, heartbeats 5 s apart instead of 1 s, `ctl status` 3.5 s (bench
      // loop-during-pull.ts, loop8). Through the pool's blocks a turn reads at most MAX_BLOCKS_HELD of them (2 MiB)
      // before the socket waits for their writes, which libuv's pool does off the loop's thread.
      if (inPlace) await writer.streamInPlace(first, have, blob.size);
      else await writer.stream(first, have, blob.size);
    }
    digest = await writer.finish();
  } catch (err) {
    await writer.abandon();
    ctx.signal.throwIfAborted();
    if (err instanceof Error && err.name === 'LlmgwError') throw err;
    // The bytes written so far stay: the next pull resumes from them.
    throw failure(`${blob.path}: the download broke off at byte ${writer.contiguous} of ${blob.size}: ${describeFetchError(err)}; pull again to resume`, { cause: err });
  } finally {
    await fh.close();
  }
  if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
  return { digest, resumedFrom, fetched: writer.fetched };
}

/**
 * A server on this host (a loopback address) is near whatever its connect
 * took: the time is that of the 'connect' event, which waits for the event
 * loop, and a loopback connect of some microseconds was timed at 2-5 ms
 * while the pull set up its other downloads at load 5 (bench 14b). Another
 * is near when its connect took less than `nearMs`; none when it is 0.
 */
function isNear(connectMs: number | undefined, remoteAddress: string | undefined, nearMs: number): boolean {
  if (nearMs <= 0) return false;
  if (remoteAddress !== undefined && hostIdentity(remoteAddress).cls === 'loopback') return true;
  return connectMs !== undefined && connectMs < nearMs;
}

/** Syncs a blob a crashed pull left whole: its bytes may still be in the page cache only. */
async function syncIfLarge(blob: BlobToFetch): Promise<void> {
  if (blob.size < SMALL_BLOB_BYTES) return;
  const fh = await openStoreFile(blob.incompletePath, READ_WRITE);
  try {
    await fh.datasync();
  } finally {
    await fh.close();
  }
}
