import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileHash } from '../../src/models/blob-digest.js';
import { SMALL_BLOB_BYTES } from '../../src/models/blob-to-fetch.js';
import { MAX_HASH_LAG_BYTES, RESUME_HASH_LAG_BYTES, ThreadHash } from '../../src/models/hash-thread.js';
import { bytes } from './fake-hub.js';

/*
 * A blob's digest computed on a hash thread from the file its writer fills
 * (issue 52, item 1): the thread reads only as far as it is told the file
 * is written without a gap, so parts written ahead are hashed in order.
 */

const dir = mkdtempSync(join(tmpdir(), 'llmgw-hash-thread-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const content = bytes(3 * 1024 * 1024 + 77, 9);
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('ThreadHash', () => {
  it('hashes a file written out of order as its bytes in order, told only how far it is whole', async () => {
    const fh = await open(join(dir, 'a'), 'w+');
    try {
      const h = ThreadHash.open('sha256', '', fh.fd);
      const third = Math.floor(content.length / 3);
      // The last part first: nothing is whole from the start yet, so nothing is said.
      await fh.write(content, 2 * third, content.length - 2 * third, 2 * third);
      await fh.write(content, 0, third, 0);
      h.advance(third);
      await fh.write(content, third, third, third);
      await expect(h.digest(content.length)).resolves.toBe(sha256(content));
    } finally {
      await fh.close();
    }
  });

  it('hashes fed blocks from memory, the bytes before them read from the file, and resolves each feed once read', async () => {
    const fh = await open(join(dir, 'm'), 'w+');
    try {
      const h = ThreadHash.open('sha256', '', fh.fd);
      const third = Math.floor(content.length / 3);
      // A resumed prefix, in the file only; then the rest fed in shared blocks, in two feeds.
      await fh.write(content, 0, third, 0);
      h.advance(third);
      const shared = (b: Buffer) => {
        const s = Buffer.from(new SharedArrayBuffer(b.length));
        b.copy(s);
        return s;
      };
      const rest = shared(content.subarray(third));
      await h.feed(third, [rest.subarray(0, 1000), rest.subarray(1000, third)]);
      await h.feed(2 * third, [rest.subarray(third)]);
      // Never written to the file: what was fed is what was hashed.
      await expect(h.digest(content.length)).resolves.toBe(sha256(content));
    } finally {
      await fh.close();
    }
  });

  it('hashes what was fed, not what the file holds: a flipped byte in memory changes the digest (the writer writes the same blocks)', async () => {
    const fh = await open(join(dir, 'n'), 'w+');
    try {
      await fh.write(content, 0, content.length, 0);
      const h = ThreadHash.open('sha256', '', fh.fd);
      const fed = Buffer.from(new SharedArrayBuffer(content.length));
      content.copy(fed);
      fed[12345] ^= 1;
      await h.feed(0, [fed]);
      await expect(h.digest(content.length)).resolves.not.toBe(sha256(content));
      // Look-alike: the same blocks unflipped hash to the file's digest.
      fed[12345] ^= 1;
      const g = ThreadHash.open('sha256', '', fh.fd);
      await g.feed(0, [fed]);
      await expect(g.digest(content.length)).resolves.toBe(sha256(content));
      // A feed after a drop is still answered, so its blocks go back to the pool.
      const d = ThreadHash.open('sha256', '', fh.fd);
      const late = d.feed(0, [fed.subarray(0, 10)]);
      await d.drop();
      await expect(late).resolves.toBeUndefined();
    } finally {
      await fh.close();
    }
  });

  it("computes a small file's git blob id with its header, as the hub names it", async () => {
    const small = Buffer.from('{"a": 1}\n');
    const fh = await open(join(dir, 'b'), 'w+');
    try {
      await fh.write(small, 0, small.length, 0);
      const h = ThreadHash.open('sha1', `blob ${small.length}\0`, fh.fd);
      await expect(h.digest(small.length)).resolves.toBe(createHash('sha1').update(`blob ${small.length}\0`).update(small).digest('hex'));
    } finally {
      await fh.close();
    }
  });

  it('fails a digest of more bytes than the file holds, and lets go of a file dropped without one', async () => {
    const fh = await open(join(dir, 'c'), 'w+');
    try {
      await fh.write(content, 0, 1000, 0);
      await expect(ThreadHash.open('sha256', '', fh.fd).digest(2000)).rejects.toThrow(/ends at byte 1000, before 2000/);
      // Its look-alike: the bytes it holds hash fine.
      await expect(ThreadHash.open('sha256', '', fh.fd).digest(1000)).resolves.toBe(sha256(content.subarray(0, 1000)));
      const dropped = ThreadHash.open('sha256', '', fh.fd);
      dropped.advance(1000);
      await expect(dropped.drop()).resolves.toBeUndefined();
    } finally {
      await fh.close();
    }
  });

  it('hashes a blob under SMALL_BLOB_BYTES here, not queued on the thread behind the large ones; a large one on the thread', async () => {
    const small = content.subarray(0, SMALL_BLOB_BYTES - 1);
    const fh = await open(join(dir, 'd'), 'w+');
    try {
      await fh.write(small, 0, small.length, 0);
      const blob = { path: 'config.json', url: 'http://hub/x', size: small.length, blobId: 'x', incompletePath: join(dir, 'd'), blobPath: join(dir, 'd.blob') };
      const h = fileHash(blob, fh);
      expect(h).not.toBeInstanceOf(ThreadHash);
      h.advance(small.length);
      await expect(h.digest(small.length)).resolves.toBe(createHash('sha1').update(`blob ${small.length}\0`).update(small).digest('hex'));
      // As the thread's: a file shorter than the bytes asked is refused, not hashed short.
      await expect(fileHash(blob, fh).digest(small.length + 10)).rejects.toThrow(`ends at byte ${small.length}, before ${small.length + 10}`);
      // Look-alike: a blob of SMALL_BLOB_BYTES goes to the thread, and hashes the same there.
      await fh.write(content, 0, SMALL_BLOB_BYTES, 0);
      const large = fileHash({ ...blob, size: SMALL_BLOB_BYTES, sha256: 'y' }, fh);
      expect(large).toBeInstanceOf(ThreadHash);
      await expect(large.digest(SMALL_BLOB_BYTES)).resolves.toBe(sha256(content.subarray(0, SMALL_BLOB_BYTES)));
    } finally {
      await fh.close();
    }
  });
});

describe('ThreadHash.behind: a writer waits for a thread fallen far behind', () => {
  const big = bytes(MAX_HASH_LAG_BYTES + 4 * 1024 * 1024 + 123, 11);
  /** The wait asked of a writer `written` bytes on, once the thread has said it runs (its first answer to advance). */
  async function runningAndBehind(h: ThreadHash, written: number): Promise<{ wait: Promise<void> }> {
    // (expect.poll would await a promise the callback returns: asked whether there is one.)
    await expect.poll(() => h.behind(written) !== undefined, { timeout: 10_000 }).toBe(true);
    // One wait at a time: asked again before it ends, the same one.
    const wait = h.behind(written) as Promise<void>;
    expect(h.behind(written)).toBe(wait);
    // In an object: an async function's promise would adopt the wait and end only with it.
    return { wait };
  }

  it('asks no wait within MAX_HASH_LAG_BYTES; past it, a wait that ends once the thread has hashed to within RESUME_HASH_LAG_BYTES', async () => {
    const fh = await open(join(dir, 'lag'), 'w+');
    try {
      const h = ThreadHash.open('sha256', '', fh.fd);
      await fh.write(big, 0, big.length, 0);
      // Before the thread has said it runs, its start is never waited for, however far behind.
      expect(h.behind(big.length)).toBeUndefined();
      h.advance(1024);
      const { wait } = await runningAndBehind(h, big.length);
      // Within MAX_HASH_LAG_BYTES of what the thread has hashed (1024 bytes): no wait.
      expect(h.behind(1024 + MAX_HASH_LAG_BYTES)).toBeUndefined();
      let woke = false;
      void wait?.then(() => {
        woke = true;
      });
      // The thread is told how far the file is whole, hashes to there and says so: the writer goes on.
      h.advance(big.length - RESUME_HASH_LAG_BYTES);
      await wait;
      expect(woke).toBe(true);
      expect(h.behind(big.length)).toBeUndefined();
      await expect(h.digest(big.length)).resolves.toBe(sha256(big));
    } finally {
      await fh.close();
    }
  });

  it('never leaves a writer waiting on a thread that cannot go on (the file ends before what it was told) or a hash ended', async () => {
    const fh = await open(join(dir, 'short'), 'w+');
    try {
      const h = ThreadHash.open('sha256', '', fh.fd);
      await fh.write(big, 0, 1024, 0);
      h.advance(512);
      const { wait } = await runningAndBehind(h, big.length);
      // Told more than the file holds: the thread fails to read it, says -1, and the wait ends.
      h.advance(big.length);
      await wait;
      expect(h.behind(big.length)).toBeUndefined();
      await expect(h.digest(big.length)).rejects.toThrow(/ends at byte 1024/);
    } finally {
      await fh.close();
    }
    const fh2 = await open(join(dir, 'dropped'), 'w+');
    try {
      const h = ThreadHash.open('sha256', '', fh2.fd);
      await fh2.write(big, 0, 1024, 0);
      h.advance(1024);
      const { wait } = await runningAndBehind(h, big.length);
      // Told nothing more: only the drop ends the wait.
      await h.drop();
      await wait;
      expect(h.behind(big.length)).toBeUndefined();
    } finally {
      await fh2.close();
    }
  });
});
