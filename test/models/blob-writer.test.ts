import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import type { FileHash } from '../../src/models/blob-digest.js';
import type { BlobToFetch } from '../../src/models/blob-to-fetch.js';
import { BlobWriter } from '../../src/models/blob-writer.js';
import { ThreadHash } from '../../src/models/hash-thread.js';
import { openHubStream } from '../../src/models/hub-stream.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * The writer hands the blocks a stream brings to the hash thread in place
 * (issue 52, item 1), one batch at a time: a thread that falls behind must
 * not hold the socket, so what comes meanwhile is written, given back and
 * hashed from the file.
 */

const BIG = bytes(4 * 1024 * 1024 + 321, 5);
const hub = new FakeHub();
hub.repos.set('acme/w', fakeRepo('acme/w', [{ path: 'w.bin', content: BIG, lfs: true }]));
const dir = mkdtempSync(join(tmpdir(), 'llmgw-blob-writer-'));
beforeAll(() => hub.start());
afterAll(async () => {
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The thread's hash, its first feed's answer held back from the writer until `open()`; counts the feeds. */
function gatedHash(fd: number): FileHash & { feeds: number; open: () => void } {
  const inner = ThreadHash.open('sha256', '', fd);
  let open: () => void = () => {};
  const gate = new Promise<void>((r) => {
    open = r;
  });
  const h = {
    feeds: 0,
    open: () => open(),
    advance: (end: number) => inner.advance(end),
    feed: (at: number, chunks: readonly Buffer[]) => {
      const read = inner.feed(at, chunks);
      return h.feeds++ === 0 ? read.then(() => gate) : read;
    },
    digest: (end: number) => inner.digest(end),
    drop: () => inner.drop(),
  };
  return h;
}

describe('BlobWriter', () => {
  it('goes on writing while the hash has not read the batch fed to it, hashing what came meanwhile from the file', async () => {
    const commit = (hub.repos.get('acme/w') as { commit: string }).commit;
    const path = join(dir, 'w.incomplete');
    const blob: BlobToFetch = { path: 'w.bin', url: `${hub.url}/acme/w/resolve/${commit}/w.bin`, size: BIG.length, sha256: sha256(BIG), blobId: 'x', incompletePath: path, blobPath: join(dir, 'w') };
    const fh = await open(path, 'w+');
    try {
      const hash = gatedHash(fh.fd);
      const ctx = { headers: {}, limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(20_000) };
      const writer = new BlobWriter(blob, fh, hash, 0, ctx);
      const s = await openHubStream(blob.url, { headers: {}, signal: ctx.signal });
      // Its first batch's blocks are still held for the hash: the rest of the 4 MiB comes all the same.
      await writer.stream(s, 0, BIG.length);
      expect(writer.contiguous).toBe(BIG.length);
      expect(hash.feeds).toBe(1);
      await expect(writer.finish()).resolves.toBe(sha256(BIG));
      hash.open();
      expect(readFileSync(path).equals(BIG)).toBe(true);
    } finally {
      await fh.close();
    }
  });

  it('feeds the hash batch after batch when it keeps up, and the digest is the same', async () => {
    const commit = (hub.repos.get('acme/w') as { commit: string }).commit;
    const path = join(dir, 'v.incomplete');
    const blob: BlobToFetch = { path: 'w.bin', url: `${hub.url}/acme/w/resolve/${commit}/w.bin`, size: BIG.length, sha256: sha256(BIG), blobId: 'x', incompletePath: path, blobPath: join(dir, 'v') };
    const fh = await open(path, 'w+');
    try {
      const inner = ThreadHash.open('sha256', '', fh.fd);
      let feeds = 0;
      const hash: FileHash = {
        advance: (end) => inner.advance(end),
        feed: (at, chunks) => {
          feeds++;
          return inner.feed(at, chunks);
        },
        digest: (end) => inner.digest(end),
        drop: () => inner.drop(),
      };
      const ctx = { headers: {}, limiter: new BandwidthLimiter(undefined), signal: AbortSignal.timeout(20_000) };
      const writer = new BlobWriter(blob, fh, hash, 0, ctx);
      await writer.stream(await openHubStream(blob.url, { headers: {}, signal: ctx.signal }), 0, BIG.length);
      await expect(writer.finish()).resolves.toBe(sha256(BIG));
      expect(feeds).toBeGreaterThanOrEqual(1);
    } finally {
      await fh.close();
    }
  });
});
