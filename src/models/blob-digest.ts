import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { BlobToFetch } from './blob-to-fetch.js';
import { ThreadHash } from './hash-thread.js';
import { BLOCK_BYTES } from './hub-stream.js';
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

/** The blob's hash on a hash thread, reading the file open at `fd` from its first byte (hash-thread.ts). */
export function hashOnThread(blob: BlobToFetch, fd: number): ThreadHash {
  if (blob.sha256 !== undefined) return ThreadHash.open('sha256', '', fd);
  return ThreadHash.open('sha1', `blob ${blob.size}\0`, fd);
}

/** Hashes the first `bytes` of the file: a resumed download's prefix, once. */
export async function hashFile(path: string, hash: Hash, bytes: number, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(path, { signal, end: bytes - 1, highWaterMark: BLOCK_BYTES, flags: READ_STREAM })) hash.update(chunk as Buffer);
}
