import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { type FileHandle, chmod, open, readFile, rename, stat, truncate, unlink, writeFile } from 'node:fs/promises';
import { isNotFound } from '../lib/errno.js';
import { failure } from '../lib/errors.js';
import type { BandwidthLimiter } from './bandwidth-limiter.js';
import { describeFetchError } from './hub-client.js';
import { BLOCK_BYTES, type HubStream, openHubStream } from './hub-stream.js';

/**
 * A file this large or more is fetched in parts of PART_BYTES, several at
 * once over their own connections (HTTP Range), as hf_transfer does: one
 * TCP stream to a CDN far away is held to a share of the link by its round
 * trip, several fill it. 16 MiB parts keep a part's request and slow start
 * small beside its transfer; a file of less than two parts gains nothing.
 */
export const PART_BYTES = 16 * 1024 * 1024;
export const RANGED_MIN_BYTES = 2 * PART_BYTES;
/** Parts of one file fetched at once (models.max_concurrent files at once, each with this many connections). */
export const CONNECTIONS_PER_FILE = 4;
/**
 * Below this a blob is not synced before its rename: the pull syncs them
 * all at once at its end, before it records the model complete, and checks
 * their digests again when it finds them after a pull that did not end
 * (pull-model.ts). Config, tokenizer and index files are many and small; one
 * fsync each cost more than their transfer.
 */
export const SMALL_BLOB_BYTES = 1024 * 1024;
/** A large blob is synced in the background every this many bytes, so the sync before its rename waits for the tail only. */
const SYNC_EVERY_BYTES = 32 * 1024 * 1024;
/** Steps in which written bytes are taken from models.bandwidth's bucket. */
const LIMITER_STEP_BYTES = 64 * 1024;

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
  /**
   * Where a ranged download records how many bytes from the start are
   * written without a gap (outside the repo folder, which huggingface_hub
   * scans): its parts ahead of that may leave holes at a crash, and a resume
   * goes on from the recorded prefix. Without it, the blob comes in one stream.
   */
  prefixPath?: string;
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
  /** Synced before its rename; a small blob is not, and its pull syncs it (SMALL_BLOB_BYTES). */
  synced: boolean;
}

export interface DownloadContext {
  headers: Record<string, string>;
  limiter: BandwidthLimiter;
  signal: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
  /** Part size of a ranged download; PART_BYTES unless a test wants many parts of a small file. */
  partBytes?: number;
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

/** Hashes the first `bytes` of the file: a resumed download's prefix, once. */
async function hashFile(path: string, hash: Hash, bytes: number, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(path, { signal, end: bytes - 1, highWaterMark: BLOCK_BYTES })) hash.update(chunk as Buffer);
}

/**
 * Where a download goes on from: the partial file's size, cut back to the
 * prefix a ranged download recorded (its parts ahead of that may have holes
 * after a crash), or to nothing when it is longer than the file can be.
 */
async function resumePoint(blob: BlobToFetch): Promise<number> {
  let have = await sizeOf(blob.incompletePath);
  const recorded = blob.prefixPath === undefined ? undefined : await readPrefix(blob.prefixPath);
  if (recorded !== undefined && recorded < have) {
    await truncate(blob.incompletePath, recorded);
    have = recorded;
  }
  if (have > blob.size) {
    // Longer than the file can be: not a prefix of it.
    await truncate(blob.incompletePath, 0);
    have = 0;
  }
  return have;
}

async function readPrefix(path: string): Promise<number | undefined> {
  try {
    const text = (await readFile(path, 'utf8')).trim();
    // Anything else (a torn write) counts as nothing kept: the download starts over, never trusts a hole.
    return /^\d{1,15}$/.test(text) ? Number(text) : 0;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

async function downloadOnce(blob: BlobToFetch, ctx: DownloadContext): Promise<{ digest: string; resumedFrom: number; fetched: number }> {
  let have = await resumePoint(blob);
  let hash = newHash(blob);
  await hashFile(blob.incompletePath, hash, have, ctx.signal);
  const resumedFrom = have;
  if (have === blob.size) {
    await syncIfLarge(blob);
    return { digest: hash.digest('hex'), resumedFrom, fetched: 0 };
  }

  const partBytes = ctx.partBytes ?? PART_BYTES;
  const ranged = blob.prefixPath !== undefined && blob.size - have >= (RANGED_MIN_BYTES / PART_BYTES) * partBytes;
  const firstEnd = ranged ? Math.min(blob.size, have + partBytes) : blob.size;
  const headers: Record<string, string> = { ...ctx.headers, 'accept-encoding': 'identity' };
  if (ranged) headers.range = `bytes=${have}-${firstEnd - 1}`;
  else if (have > 0) headers.range = `bytes=${have}-`;
  let first: HubStream;
  try {
    first = await openHubStream(blob.url, { headers, signal: ctx.signal });
  } catch (err) {
    ctx.signal.throwIfAborted();
    throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${describeFetchError(err)}`, { cause: err });
  }
  if (first.status === 206 && !contentRangeIs(first.headers.get('content-range'), have, ranged ? firstEnd : undefined, blob.size)) {
    first.cancel();
    throw failure(`${blob.path}: the hub answered a request for bytes ${have}- with ${first.headers.get('content-range')}; try again`);
  }
  if (first.status === 200 && have > 0) {
    // The server ignored Range (huggingface_hub meets this behind some CDNs): start over.
    await truncate(blob.incompletePath, 0);
    have = 0;
    hash = newHash(blob);
  } else if (first.status !== 200 && first.status !== 206) {
    first.cancel();
    throw failure(`${blob.path}: the hub answered HTTP ${first.status}${first.status === 401 || first.status === 403 ? '; set models.hub.token_file to a token that may read it' : ''}`);
  }
  if (first.chunked) {
    // Not a file server's answer for a file; read the slow way rather than not at all.
    first.cancel();
    return fetchStream(blob, ctx, have, hash, resumedFrom, first.url);
  }

  // w+, not w: a part written ahead of the hash is read back.
  const fh = await open(blob.incompletePath, have > 0 ? 'r+' : 'w+', 0o600);
  const writer = new BlobWriter(blob, fh, hash, have, ctx);
  try {
    if (first.status === 206 && ranged) {
      await writer.recordPrefix();
      await fetchParts(blob, ctx, writer, first, have, firstEnd);
    } else {
      // One stream: the file stays a plain prefix, whatever a ranged attempt recorded before.
      if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
      await writer.stream(first, have, blob.size);
    }
    await writer.finish();
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
  return { digest: hash.digest('hex'), resumedFrom, fetched: writer.fetched };
}

/**
 * The parts of [have, size) after the first (already answered, bytes
 * have..firstEnd), CONNECTIONS_PER_FILE at a time, each a Range request
 * written at its offset; the first failure ends the others.
 */
async function fetchParts(blob: BlobToFetch, ctx: DownloadContext, writer: BlobWriter, first: HubStream, have: number, firstEnd: number): Promise<void> {
  const parts: [number, number][] = [];
  const partBytes = ctx.partBytes ?? PART_BYTES;
  for (let at = firstEnd; at < blob.size; at += partBytes) parts.push([at, Math.min(blob.size, at + partBytes)]);
  const local = new AbortController();
  const signal = AbortSignal.any([ctx.signal, local.signal]);
  let next = 0;
  const worker = async (stream?: HubStream, start = 0, end = 0) => {
    for (;;) {
      if (!stream) {
        const part = parts[next++];
        if (!part) return;
        [start, end] = part;
        stream = await openHubStream(blob.url, { headers: { ...ctx.headers, 'accept-encoding': 'identity', range: `bytes=${start}-${end - 1}` }, signal });
        if (stream.status !== 206 || !contentRangeIs(stream.headers.get('content-range'), start, end, blob.size)) {
          stream.cancel();
          throw failure(`${blob.path}: the hub answered a request for bytes ${start}-${end - 1} with HTTP ${stream.status} ${stream.headers.get('content-range') ?? ''}; try again`);
        }
      }
      await writer.stream(stream, start, end);
      stream = undefined;
    }
  };
  let firstErr: unknown;
  const fail = (err: unknown) => {
    firstErr ??= err;
    local.abort(err);
  };
  await Promise.all([worker(first, have, firstEnd).catch(fail), ...Array.from({ length: CONNECTIONS_PER_FILE - 1 }, () => worker().catch(fail))]);
  if (firstErr !== undefined) throw firstErr;
}

/**
 * Writes one blob's bytes as they come, from one stream or several at their
 * offsets, and hashes them in order: a block that arrives where the hash has
 * got to is hashed at once, before its write; one that arrives ahead of it
 * (a later part) is written, and read back from the page cache once the
 * hash reaches it, while the other parts go on downloading. The file is
 * synced in the background every SYNC_EVERY_BYTES, so the sync before the
 * rename waits only for the tail, and the bytes contiguous from the start
 * are recorded (a ranged download's prefixPath) for a resume after a crash.
 */
class BlobWriter {
  /** Bytes written by this download. */
  fetched = 0;
  /** Bytes written without a gap from the start of the file. */
  contiguous: number;
  private hashedTo: number;
  /** Written and not hashed yet: start → end, one entry per block. */
  private readonly unhashed = new Map<number, number>();
  /** Written beyond `contiguous`: start → end. */
  private readonly ahead = new Map<number, number>();
  private reading: Promise<void> | undefined;
  private readFailure: unknown;
  private syncing: Promise<void> | undefined;
  private syncedAt = 0;
  private ranged = false;
  private recordedAt: number;
  private recording: Promise<void> = Promise.resolve();
  private readonly base: number;

  constructor(
    private readonly blob: BlobToFetch,
    private readonly fh: FileHandle,
    private readonly hash: Hash,
    have: number,
    private readonly ctx: DownloadContext,
  ) {
    this.base = have;
    this.contiguous = have;
    this.hashedTo = have;
    this.recordedAt = have;
  }

  /** Reads `s`'s body into bytes [start, end) of the file; throws if it brings more or fewer. */
  async stream(s: HubStream, start: number, end: number): Promise<void> {
    let pos = start;
    let chain: Promise<void> = Promise.resolve();
    let broken: unknown;
    const stop = (err: unknown) => {
      broken ??= err;
      s.cancel(err);
    };
    try {
      await s.body((chunk, release) => {
        const at = pos;
        pos += chunk.length;
        if (pos > end) {
          release();
          return stop(failure(`${this.blob.path}: the hub sent more than the ${this.blob.size} bytes it listed`));
        }
        chain = chain.then(async () => {
          try {
            if (broken === undefined) await this.put(at, chunk);
          } catch (err) {
            stop(err);
          } finally {
            release();
          }
        });
      });
    } catch (err) {
      broken ??= err;
    } finally {
      await chain;
    }
    if (broken !== undefined) throw broken;
    if (pos !== end) throw failure(`${this.blob.path}: the hub sent ${pos} of ${this.blob.size} bytes; pull again to resume`);
  }

  private async put(at: number, chunk: Buffer): Promise<void> {
    // The limiter in steps of a socket read's size: a megabyte at once would overdraw its bucket and end the pull early.
    for (let off = 0; off < chunk.length; off += LIMITER_STEP_BYTES) await this.ctx.limiter.take(Math.min(LIMITER_STEP_BYTES, chunk.length - off), this.ctx.signal);
    if (at === this.hashedTo && this.reading === undefined) {
      this.hash.update(chunk);
      this.hashedTo += chunk.length;
    }
    await this.fh.write(chunk, 0, chunk.length, at);
    this.written(at, at + chunk.length);
  }

  private written(start: number, end: number): void {
    this.fetched += end - start;
    if (start >= this.hashedTo) this.unhashed.set(start, end);
    // Also after a block hashed as it came: the hash may now have reached one written ahead.
    void this.kick();
    this.ahead.set(start, end);
    for (let next = this.ahead.get(this.contiguous); next !== undefined; next = this.ahead.get(this.contiguous)) {
      this.ahead.delete(this.contiguous);
      this.contiguous = next;
    }
    this.ctx.onProgress?.({ bytes: this.base + this.fetched });
    if (this.ranged && this.contiguous - this.recordedAt >= (this.ctx.partBytes ?? PART_BYTES)) void this.recordPrefix();
    if (this.fetched - this.syncedAt >= SYNC_EVERY_BYTES && this.syncing === undefined) {
      this.syncedAt = this.fetched;
      this.syncing = this.fh
        .datasync()
        .catch(() => {})
        .finally(() => {
          this.syncing = undefined;
        });
    }
  }

  /**
   * Hashes what was written where the hash has got to, reading it back; one
   * reader at a time. Started only with something to read: a reader that
   * ended before its assignment (nothing to read, so no await) would have
   * stayed `reading` for good, and nothing would have been hashed again.
   */
  private kick(): Promise<void> {
    if (this.reading === undefined && this.unhashed.has(this.hashedTo)) {
      const run: Promise<void> = this.readBack().finally(() => {
        if (this.reading === run) this.reading = undefined;
      });
      this.reading = run;
    }
    return this.reading ?? Promise.resolve();
  }

  private async readBack(): Promise<void> {
    try {
      for (let end = this.unhashed.get(this.hashedTo); end !== undefined; end = this.unhashed.get(this.hashedTo)) {
        const len = end - this.hashedTo;
        const buf = Buffer.allocUnsafe(len);
        const { bytesRead } = await this.fh.read(buf, 0, len, this.hashedTo);
        if (bytesRead !== len) throw new Error(`read back ${bytesRead} of ${len} bytes at ${this.hashedTo}`);
        this.hash.update(buf);
        this.unhashed.delete(this.hashedTo);
        this.hashedTo = end;
      }
    } catch (err) {
      this.readFailure ??= err;
    }
  }

  /** Records the contiguous prefix for a resume; from the first call on the download is ranged. Best effort: without it a resume after a crash starts the file over. */
  recordPrefix(): Promise<void> {
    const path = this.blob.prefixPath;
    if (path === undefined) return Promise.resolve();
    this.ranged = true;
    this.recordedAt = this.contiguous;
    const value = String(this.contiguous);
    this.recording = this.recording.then(() => writeFile(path, value, { mode: 0o644 }).catch(() => {}));
    return this.recording;
  }

  /** Every byte written and hashed, and (for a large blob) synced: the caller may compare and rename. */
  async finish(): Promise<void> {
    while (this.reading) await this.reading;
    await this.kick();
    if (this.readFailure !== undefined) throw this.readFailure;
    if (this.hashedTo !== this.blob.size) throw new Error(`hashed ${this.hashedTo} of ${this.blob.size} bytes`);
    await this.syncing;
    if (this.blob.size >= SMALL_BLOB_BYTES) await this.fh.datasync();
    await this.recording;
  }

  /** After a failure: nothing in flight on the file, and the prefix recorded for the next pull. */
  async abandon(): Promise<void> {
    while (this.reading) await this.reading;
    await this.syncing;
    if (this.ranged) await this.recordPrefix();
  }
}

/** Syncs a blob a crashed pull left whole: its bytes may still be in the page cache only. */
async function syncIfLarge(blob: BlobToFetch): Promise<void> {
  if (blob.size < SMALL_BLOB_BYTES) return;
  const fh = await open(blob.incompletePath, 'r+');
  try {
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/**
 * The old way, through fetch, for an answer in chunks (Transfer-Encoding:
 * chunked), which no file server sends for a file of known size but a proxy
 * might: one stream, each chunk hashed and appended as it comes.
 */
async function fetchStream(blob: BlobToFetch, ctx: DownloadContext, from: number, hashSoFar: Hash, resumedFrom: number, answeredAt: string): Promise<{ digest: string; resumedFrom: number; fetched: number }> {
  let have = from;
  let hash = hashSoFar;
  // Asked again where the first request's redirects (checked by openHubStream) ended, following none: the token only to the hub's own origin.
  const sameOrigin = new URL(answeredAt).origin === new URL(blob.url).origin;
  const headers: Record<string, string> = { ...(sameOrigin ? ctx.headers : Object.fromEntries(Object.entries(ctx.headers).filter(([k]) => k.toLowerCase() !== 'authorization'))), 'accept-encoding': 'identity' };
  if (have > 0) headers.range = `bytes=${have}-`;
  let res: Response;
  try {
    res = await fetch(answeredAt, { headers, signal: ctx.signal, redirect: 'error' });
  } catch (err) {
    ctx.signal.throwIfAborted();
    throw failure(`${blob.path}: cannot download from ${new URL(blob.url).origin}: ${describeFetchError(err)}`, { cause: err });
  }
  if (res.status === 200 && have > 0) {
    await truncate(blob.incompletePath, 0);
    have = 0;
    hash = newHash(blob);
  } else if (res.status !== 200 && !(res.status === 206 && contentRangeIs(res.headers.get('content-range'), have, undefined, blob.size))) {
    await res.body?.cancel();
    throw failure(`${blob.path}: the hub answered HTTP ${res.status} ${res.headers.get('content-range') ?? ''}; try again`);
  }
  if (!res.body) throw failure(`${blob.path}: the hub sent no body`);
  if (blob.prefixPath !== undefined) await unlink(blob.prefixPath).catch(() => {});
  const fh = await open(blob.incompletePath, have > 0 ? 'a' : 'w', 0o600);
  let fetched = 0;
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      if (have + chunk.byteLength > blob.size) throw failure(`${blob.path}: the hub sent more than the ${blob.size} bytes it listed`);
      await ctx.limiter.take(chunk.byteLength, ctx.signal);
      await fh.write(chunk);
      hash.update(chunk);
      have += chunk.byteLength;
      fetched += chunk.byteLength;
      ctx.onProgress?.({ bytes: have });
    }
    if (blob.size >= SMALL_BLOB_BYTES) await fh.datasync();
  } catch (err) {
    ctx.signal.throwIfAborted();
    if (err instanceof Error && err.name === 'LlmgwError') throw err;
    throw failure(`${blob.path}: the download broke off at byte ${have} of ${blob.size}: ${describeFetchError(err)}; pull again to resume`, { cause: err });
  } finally {
    await fh.close();
  }
  if (have !== blob.size) throw failure(`${blob.path}: the hub sent ${have} of ${blob.size} bytes; pull again to resume`);
  return { digest: hash.digest('hex'), resumedFrom, fetched };
}

/** Content-Range names bytes from `start` (to `end`, exclusive, when given) of a file of `size` (or `*`). */
function contentRangeIs(header: string | null | undefined, start: number, end: number | undefined, size: number): boolean {
  const m = header == null ? null : /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header.trim());
  if (m === null || Number(m[1]) !== start) return false;
  if (end !== undefined && Number(m[2]) !== end - 1) return false;
  return m[3] === '*' || Number(m[3]) === size;
}
