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
  digest(end: number): Promise<string>;
  drop(): Promise<void>;
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
