import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { type BlobToFetch, SMALL_BLOB_BYTES } from './blob-to-fetch.js';
import { ThreadHash } from './hash-thread.js';
import { BLOCK_BYTES } from './block-pool.js';
import { READ_STREAM } from './store-files.js';

/*
 * A blob's digest: the one the hub lists (sha256 for LFS files, the git
 * blob sha1 for the rest) and the hash that computes it from the bytes.
 */

export function expectedDigest(blob: BlobToFetch): string {
  return blob.sha256 ?? blob.blobId;
}

export function newHash(blob: BlobToFetch): Hash {
  if (blob.sha256 !== undefined) return createHash('sha256');
  // The git object id of a small file: what the hub's blobId and the cache's blob name are.
  return createHash('sha1').update(`blob ${blob.size}\0`);
}

/** A blob's hash from the bytes in its file: told how far the file is written without a gap, asked for the digest at the end, or dropped. */
export interface FileHash {
  advance(end: number): void;
  /** Hashes these bytes from `at` on from memory, where it can (a thread's hash; the promise says when they may be reused); undefined where it cannot. */
  feed?(at: number, chunks: readonly Buffer[]): Promise<void>;
  /** Hashes `chunk`, the bytes from `at` on, here and now (an inline hash): the caller may reuse it once this returns. */
  take?(at: number, chunk: Buffer): void;
  /**
   * With `written` bytes in the file: a promise when the hash has fallen so
   * far behind that the writer should wait for it (resolved once it has
   * caught up enough), else undefined (a thread's hash; hash-thread.ts).
   */
  behind?(written: number): Promise<void> | undefined;
  digest(end: number): Promise<string>;
  drop(): Promise<void>;
}

/**
 * A blob's hash on the thread that reads its one stream, from each block
 * as it comes, before its write.
 */
export class InlineHash implements FileHash {
  private readonly hash: Hash;
  private at = 0;

  constructor(
    blob: BlobToFetch,
    private readonly fh: FileHandle,
  ) {
    this.hash = newHash(blob);
  }

  /** The bytes [at, end) read back from the file: a kept prefix, or anything a stream brought out of order. */
  private async readTo(end: number): Promise<void> {
    const buf = Buffer.allocUnsafe(Math.min(BLOCK_BYTES * 4, Math.max(1, end - this.at)));
    while (this.at < end) {
      const { bytesRead } = await this.fh.read(buf, 0, Math.min(buf.length, end - this.at), this.at);
      if (bytesRead === 0) throw new Error(`hashing the file: it ends at byte ${this.at}, before ${end}`);
      this.hash.update(buf.subarray(0, bytesRead));
      this.at += bytesRead;
    }
  }

  /** The file's first `end` bytes, before the stream's. */
  prefix(end: number): Promise<void> {
    return this.readTo(end);
  }

  advance(): void {}

  take(at: number, chunk: Buffer): void {
    if (at !== this.at) return;
    this.hash.update(chunk);
    this.at += chunk.length;
  }

  async digest(end: number): Promise<string> {
    await this.readTo(end);
    return this.hash.digest('hex');
  }

  async drop(): Promise<void> {}
}

/**
 * The blob's hash from the file open as `fh`: on a hash thread
 * (hash-thread.ts), or, for a blob under SMALL_BLOB_BYTES, here, read back
 * whole once it is written. A small blob's sha1 takes well under a
 * millisecond, but on the thread it waited behind every megabyte of the
 * large blobs hashed before it: 170-440 ms in bench 14b, its download
 * holding one of models.max_concurrent's places all that time.
 */
export function fileHash(blob: BlobToFetch, fh: FileHandle): FileHash {
  if (blob.size < SMALL_BLOB_BYTES) return new SmallFileHash(blob, fh);
  if (blob.sha256 !== undefined) return ThreadHash.open('sha256', '', fh.fd);
  return ThreadHash.open('sha1', `blob ${blob.size}\0`, fh.fd);
}

class SmallFileHash implements FileHash {
  constructor(
    private readonly blob: BlobToFetch,
    private readonly fh: FileHandle,
  ) {}

  advance(): void {}

  async digest(end: number): Promise<string> {
    const buf = Buffer.allocUnsafe(end);
    let at = 0;
    while (at < end) {
      const { bytesRead } = await this.fh.read(buf, at, end - at, at);
      if (bytesRead === 0) throw new Error(`hashing the file: it ends at byte ${at}, before ${end}`);
      at += bytesRead;
    }
    return newHash(this.blob).update(buf).digest('hex');
  }

  async drop(): Promise<void> {}
}

/** Hashes the first `bytes` of the file: a resumed download's prefix, once. */
export async function hashFile(path: string, hash: Hash, bytes: number, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(path, { signal, end: bytes - 1, highWaterMark: BLOCK_BYTES, flags: READ_STREAM })) hash.update(chunk as Buffer);
}
