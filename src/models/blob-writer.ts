import { writeSync, writev } from 'node:fs';
import { type FileHandle, writeFile } from 'node:fs/promises';
import { WRITE_TRUNCATE } from './store-files.js';
import { failure } from '../lib/errors.js';
import { type BlobToFetch, type DownloadContext, PART_BYTES, SMALL_BLOB_BYTES } from './blob-to-fetch.js';
import type { FileHash } from './blob-digest.js';
import type { HubStream } from './hub-stream.js';

/**
 * A large blob is synced in the background, one datasync at a time, a new
 * one once this many bytes came since the last began: the disk writes back
 * as the bytes come, and the sync before its rename waits for the tail
 * only. Every 32 MiB left 35-50 ms of flush after the last byte of bench
 * 14b's 64 MiB files; every 8 MiB, 5-15 ms (issue 52, item 1).
 */
const SYNC_EVERY_BYTES = 8 * 1024 * 1024;
/** Batches fed to the hash from memory and not yet read by it, at most (feedHash). */
const MAX_FEEDS_AHEAD = 1;
/** The hash is told the file is whole this much further at a time (and the rest at the end). */
const HASH_STEP_BYTES = 4 * 1024 * 1024;
/** Steps in which written bytes are taken from models.bandwidth's bucket. */
const LIMITER_STEP_BYTES = 64 * 1024;

/**
 * Writes one blob's bytes as they come, from one stream or several at their
 * offsets, and has them hashed in order (blob-digest.ts fileHash: on a hash
 * thread, a small blob here): the bytes that follow what the hash was given
 * from the blocks they came in, beside their write; a part written ahead of
 * that from the file, once the parts before it are in. The file is synced in the background every SYNC_EVERY_BYTES, so the
 * sync before the rename waits only for the tail, and the bytes contiguous
 * from the start are recorded (a ranged download's prefixPath) for a resume
 * after a crash. One stream's body read in place (streamInPlace) is hashed
 * and written from the buffer it came in, on this thread.
 */
export class BlobWriter {
  /** Bytes written by this download. */
  fetched = 0;
  /** Bytes written without a gap from the start of the file. */
  contiguous: number;
  /** Written beyond `contiguous`: start → end. */
  private readonly ahead = new Map<number, number>();
  private syncing: Promise<void> | undefined;
  private syncedAt = 0;
  private ranged = false;
  private recordedAt: number;
  private recording: Promise<void> = Promise.resolve();
  private readonly base: number;
  /** Batches fed to the hash and not yet read by it. */
  private feeding = 0;
  /** How far the hash was given the bytes: fed from memory, or told the file is whole. */
  private toldHash: number;

  /** `hash` is told of `have`, the bytes already in the file, by its caller: it reads them too. */
  constructor(
    private readonly blob: BlobToFetch,
    private readonly fh: FileHandle,
    private readonly hash: FileHash,
    have: number,
    private readonly ctx: DownloadContext,
  ) {
    this.base = have;
    this.contiguous = have;
    this.recordedAt = have;
    this.toldHash = have;
  }

  /**
   * Reads `s`'s body into bytes [start, end) of the file; throws if it
   * brings more or fewer. The blocks that come while a write is in flight
   * go to the file together in one writev when it returns: under load each
   * write is a round trip to libuv's pool and back, and one per block (4,096
   * a GiB) held a connection's four blocks waiting on the scheduler (issue 52, item 1).
   */
  async stream(s: HubStream, start: number, end: number): Promise<void> {
    let pos = start;
    let writeAt = start;
    const queue: Buffer[] = [];
    const releases: (() => void)[] = [];
    let pumping: Promise<void> | undefined;
    let broken: unknown;
    const stop = (err: unknown) => {
      broken ??= err;
      s.cancel(err);
    };
    const pump = async () => {
      while (queue.length > 0) {
        const batch = queue.splice(0);
        const done = releases.splice(0);
        const at = writeAt;
        let length = 0;
        for (const b of batch) length += b.length;
        writeAt += length;
        const hashed = broken === undefined ? this.feedHash(at, batch, length) : undefined;
        try {
          if (broken === undefined) await this.put(at, batch, length);
        } catch (err) {
          stop(err);
        } finally {
          // Blocks the hash reads in place go back once it has read them; the next batch is written meanwhile.
          if (hashed) void hashed.then(() => releaseAll(done));
          else releaseAll(done);
        }
      }
      pumping = undefined;
    };
    try {
      await s.body((chunk, release) => {
        pos += chunk.length;
        if (pos > end) {
          release();
          return stop(failure(`${this.blob.path}: the hub sent more than the ${this.blob.size} bytes it listed`));
        }
        this.hash.take?.(pos - chunk.length, chunk);
        queue.push(chunk);
        releases.push(release);
        pumping ??= pump();
      });
    } catch (err) {
      broken ??= err;
    } finally {
      await pumping;
    }
    if (broken !== undefined) throw broken;
    if (pos !== end) throw failure(`${this.blob.path}: the hub sent ${pos} of ${this.blob.size} bytes; pull again to resume`);
  }

  /**
   * Reads one stream's body into bytes [start, end) of the file in place
   * (HubStream.bodyInPlace): each socket read written from the buffer it
   * came in, before the next read, and the hash (a thread's, reading the
   * file back as written, or an inline one) told. Not through block
   * hand-overs and libuv's pool: on this host's two cores that machinery
   * cost more CPU than the transfer itself (the pull's threads 2-3x curl's
   * CPU for the same bytes; bench 14b, issue 52, item 1). The write is
   * synchronous: the file's own background syncs every SYNC_EVERY_BYTES
   * keep its dirty pages far below the kernel's limits, so it copies into
   * the page cache and does not wait for the disk. Throws if the body
   * brings more or fewer bytes.
   */
  async streamInPlace(s: HubStream, start: number, end: number): Promise<void> {
    let pos = start;
    const fd = this.fh.fd;
    await s.bodyInPlace((chunk) => {
      if (pos + chunk.length > end) throw failure(`${this.blob.path}: the hub sent more than the ${this.blob.size} bytes it listed`);
      this.hash.take?.(pos, chunk);
      for (let done = 0; done < chunk.length; ) {
        const n = writeSync(fd, chunk, done, chunk.length - done, pos + done);
        if (n <= 0) throw new Error(`wrote nothing at byte ${pos + done}`);
        done += n;
      }
      this.written(pos, pos + chunk.length);
      pos += chunk.length;
      // A hash thread fallen far behind holds the socket until it catches up (ThreadHash.behind says why).
      return this.hash.behind?.(pos);
    });
    if (pos !== end) throw failure(`${this.blob.path}: the hub sent ${pos} of ${this.blob.size} bytes; pull again to resume`);
  }

  /**
   * Hands the batch to the hash from memory, beside its write, when it
   * follows what the hash was given without a gap (one stream's bytes, in
   * order; a ranged part written ahead is read from the file once the
   * parts before it are in) and the hash has read the batch fed before:
   * a hash thread that falls behind (on a busy machine) must not hold the
   * socket, whose blocks are not reused before it has read them; the bytes
   * that come meanwhile are written, given back, and read from the file.
   * Resolves when the blocks may be reused.
   */
  private feedHash(at: number, chunks: Buffer[], length: number): Promise<void> | undefined {
    if (this.hash.feed === undefined || at !== this.toldHash || this.feeding >= MAX_FEEDS_AHEAD) return undefined;
    for (const c of chunks) if (!(c.buffer instanceof SharedArrayBuffer)) return undefined;
    this.toldHash = at + length;
    this.feeding++;
    return this.hash.feed(at, chunks).finally(() => {
      this.feeding--;
    });
  }

  /** Writes `chunks` (`length` bytes in all) at `at`, in one writev and on after a short write. */
  private async put(at: number, chunks: Buffer[], length: number): Promise<void> {
    if (this.ctx.limiter.limited) {
      // The limiter in steps of a socket read's size: a megabyte at once would overdraw its bucket and end the pull early.
      for (let off = 0; off < length; off += LIMITER_STEP_BYTES) await this.ctx.limiter.take(Math.min(LIMITER_STEP_BYTES, length - off), this.ctx.signal);
    }
    let left = chunks;
    let done = 0;
    while (done < length) {
      const n = await writevAt(this.fh.fd, left, at + done);
      if (n <= 0) throw new Error(`wrote nothing at byte ${at + done}`);
      done += n;
      left = skipBytes(left, n);
    }
    this.written(at, at + length);
  }

  private written(start: number, end: number): void {
    this.fetched += end - start;
    this.ahead.set(start, end);
    const was = this.contiguous;
    for (let next = this.ahead.get(this.contiguous); next !== undefined; next = this.ahead.get(this.contiguous)) {
      this.ahead.delete(this.contiguous);
      this.contiguous = next;
    }
    // Written (the write has returned), so the thread's read of the file finds the bytes. Told in steps: a
    // message a block woke the hash thread 4,096 times a GiB; digest() tells it the rest.
    if (this.contiguous > was && this.contiguous - this.toldHash >= HASH_STEP_BYTES) {
      this.toldHash = this.contiguous;
      this.hash.advance(this.contiguous);
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

  /** Records the contiguous prefix for a resume; from the first call on the download is ranged. Best effort: without it a resume after a crash starts the file over. */
  recordPrefix(): Promise<void> {
    const path = this.blob.prefixPath;
    if (path === undefined) return Promise.resolve();
    this.ranged = true;
    this.recordedAt = this.contiguous;
    const value = String(this.contiguous);
    this.recording = this.recording.then(() => writeFile(path, value, { mode: 0o644, flag: WRITE_TRUNCATE }).catch(() => {}));
    return this.recording;
  }

  /**
   * Every byte written and hashed, and (for a large blob) synced: resolves
   * with the digest, which the caller compares before the rename. The sync
   * runs beside the hash's tail.
   */
  async finish(): Promise<string> {
    if (this.contiguous !== this.blob.size) throw new Error(`wrote ${this.contiguous} of ${this.blob.size} bytes without a gap`);
    const synced = (async () => {
      await this.syncing;
      if (this.blob.size >= SMALL_BLOB_BYTES) await this.fh.datasync();
      await this.recording;
    })();
    const [digest] = await Promise.all([this.hash.digest(this.blob.size), synced]);
    return digest;
  }

  /** After a failure: nothing in flight on the file (the hash thread let go of it), and the prefix recorded for the next pull. */
  async abandon(): Promise<void> {
    await this.hash.drop();
    await this.syncing;
    if (this.ranged) await this.recordPrefix();
  }
}

function releaseAll(releases: readonly (() => void)[]): void {
  for (const release of releases) release();
}

/** fs.writev at a position, as a promise (FileHandle's adds a reference count and a promise object per call). */
function writevAt(fd: number, chunks: Buffer[], at: number): Promise<number> {
  return new Promise((resolve, reject) => writev(fd, chunks, at, (err, n) => (err ? reject(err) : resolve(n))));
}

/** `chunks` without their first `n` bytes. */
function skipBytes(chunks: Buffer[], n: number): Buffer[] {
  const out: Buffer[] = [];
  let skip = n;
  for (const c of chunks) {
    if (skip >= c.length) {
      skip -= c.length;
      continue;
    }
    out.push(skip > 0 ? c.subarray(skip) : c);
    skip = 0;
  }
  return out;
}
