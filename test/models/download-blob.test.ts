import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BandwidthLimiter } from '../../src/models/bandwidth-limiter.js';
import type { BlobToFetch, DownloadContext } from '../../src/models/blob-to-fetch.js';
import { downloadBlob } from '../../src/models/download-blob.js';
import { pooledBlocks } from '../../src/models/block-pool.js';
import { FakeHub, bytes, fakeRepo, sha256 } from './fake-hub.js';

/*
 * One blob's download (issue 36 item 8): a large file comes in ranged parts
 * over several connections and is hashed in order; a server without ranges
 * gets one stream; a broken ranged download resumes from the prefix it
 * recorded, never from a hole. Parts of 64 KiB here so a 1 MiB file has 16.
 */

const PART = 64 * 1024;
const BIG = bytes(1024 * 1024 + 123, 7);
const hub = new FakeHub();
hub.repos.set('acme/big', fakeRepo('acme/big', [{ path: 'w.safetensors', content: BIG, lfs: true }]));

let dir: string;
beforeAll(() => hub.start());
afterAll(() => hub.stop());
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-download-'));
  hub.requests.length = 0;
  hub.corrupt.clear();
  hub.trickle.clear();
  hub.noRanges = false;
  hub.holdStart.clear();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function blob(): BlobToFetch {
  const commit = (hub.repos.get('acme/big') as { commit: string }).commit;
  return {
    path: 'w.safetensors',
    url: `${hub.url}/acme/big/resolve/${commit}/w.safetensors`,
    size: BIG.length,
    sha256: sha256(BIG),
    blobId: 'unused',
    incompletePath: join(dir, 'w.incomplete'),
    blobPath: join(dir, 'w'),
    prefixPath: join(dir, 'w.prefix'),
  };
}

/**
 * This loopback hub judged far (nearRttMs 0: parts whatever its connect took) or, with `near`, near (any connect
 * under a minute): the judgement is the test's, not a loaded machine's connect time against NEAR_RTT_MS.
 */
function ctx(signal = AbortSignal.timeout(20_000), near = false, sharedLoop = false): DownloadContext {
  return { headers: {}, limiter: new BandwidthLimiter(undefined), signal, partBytes: PART, nearRttMs: near ? 60_000 : 0, sharedLoop };
}

const rangesAsked = () => hub.downloads('w.safetensors').map((r) => r.range);

describe('downloadBlob', () => {
  it('fetches a large file in ranged parts, several at once, and renames it verified, leaving no prefix record', async () => {
    const r = await downloadBlob(blob(), ctx());
    expect(r).toMatchObject({ fetched: BIG.length, resumedFrom: 0, mismatches: 0, synced: true });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    const parts = Math.ceil(BIG.length / PART);
    expect(rangesAsked()).toHaveLength(parts);
    expect(new Set(rangesAsked())).toEqual(new Set(Array.from({ length: parts }, (_, i) => `bytes=${i * PART}-${Math.min(BIG.length, (i + 1) * PART) - 1}`)));
    expect(existsSync(join(dir, 'w.prefix'))).toBe(false);
    expect(existsSync(join(dir, 'w.incomplete'))).toBe(false);
    // Its connections' blocks are kept for the next ones (at most 64), and the next download's bytes are whole.
    expect(pooledBlocks()).toBeGreaterThan(0);
    expect(pooledBlocks()).toBeLessThanOrEqual(64);
  });

  it('hashes in order when the parts after the first arrive before it (each read back once the hash reaches it)', async () => {
    // Before the fix a part written ahead of the hash, with nothing yet to read back, left the
    // read-back loop marked running for good: nothing was hashed again and the pull spun at 100%
    // CPU; and the file, opened write-only, could not have been read back anyway (EBADF).
    hub.holdStart.set('w.safetensors', 300);
    const r = await downloadBlob(blob(), ctx());
    expect(r).toMatchObject({ fetched: BIG.length, mismatches: 0 });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
  });

  it('takes one stream from a server that ignores Range', async () => {
    hub.noRanges = true;
    const r = await downloadBlob(blob(), ctx());
    expect(r.fetched).toBe(BIG.length);
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    expect(rangesAsked()).toEqual([`bytes=0-${PART - 1}`]);
  });

  it('refuses a ranged file with a flipped byte, deletes it and fetches it again', async () => {
    // Every part of the first attempt is served from the corrupted copy; the second attempt is clean.
    hub.corrupt.set('w.safetensors', Math.ceil(BIG.length / PART));
    const r = await downloadBlob(blob(), ctx());
    expect(r.mismatches).toBe(1);
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
  });

  it('resumes from the prefix a ranged download recorded, cutting what its parts wrote past it', async () => {
    // As a crash leaves it: two parts whole, then a part written ahead with a hole before it.
    const partial = Buffer.concat([BIG.subarray(0, 2 * PART), Buffer.alloc(PART), BIG.subarray(3 * PART, 4 * PART)]);
    writeFileSync(join(dir, 'w.incomplete'), partial);
    writeFileSync(join(dir, 'w.prefix'), String(2 * PART));
    const r = await downloadBlob(blob(), ctx());
    expect(r).toMatchObject({ resumedFrom: 2 * PART, fetched: BIG.length - 2 * PART, mismatches: 0 });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    expect(rangesAsked()[0]).toBe(`bytes=${2 * PART}-${3 * PART - 1}`);
  });

  it('records its prefix when it breaks off, and the next download goes on from there', async () => {
    // Slow enough to stop in the middle: every part trickles 16 KiB a tick.
    hub.trickle.set('w.safetensors', 16 * 1024);
    const stop = new AbortController();
    const first = downloadBlob(blob(), ctx(stop.signal));
    await waitUntil(() => Number(readFileSync(join(dir, 'w.prefix'), 'utf8')) >= 2 * PART);
    stop.abort();
    await expect(first).rejects.toThrow();
    const recorded = Number(readFileSync(join(dir, 'w.prefix'), 'utf8'));
    expect(recorded).toBeGreaterThanOrEqual(2 * PART);
    expect(statSync(join(dir, 'w.incomplete')).size).toBeGreaterThanOrEqual(recorded);

    hub.trickle.clear();
    hub.requests.length = 0;
    const r = await downloadBlob(blob(), ctx());
    expect(r.resumedFrom).toBe(recorded);
    expect(r.fetched).toBe(BIG.length - recorded);
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    expect(rangesAsked()[0]).toMatch(new RegExp(`^bytes=${recorded}-`));
  });

  it('takes a file in one stream from a near server, asked for once its connect is timed, and in parts from the same server judged far', async () => {
    // A first part and then the rest held two connections per file where one does; parts ending together left the hash
    // three parts to read after the last byte (issue 52, item 1).
    const near = await downloadBlob(blob(), ctx(undefined, true));
    expect(near).toMatchObject({ fetched: BIG.length, resumedFrom: 0, mismatches: 0, synced: true });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    expect(rangesAsked()).toEqual([undefined]);
    expect(existsSync(join(dir, 'w.prefix'))).toBe(false);

    rmSync(join(dir, 'w'));
    hub.requests.length = 0;
    const far = await downloadBlob(blob(), ctx());
    expect(far.fetched).toBe(BIG.length);
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
    expect(rangesAsked()).toHaveLength(Math.ceil(BIG.length / PART));
  });

  it('judges a server on a loopback address near however long its connect event took to come; with nearRttMs 0, far', async () => {
    // A connect timed by its event waits for the event loop: a loopback one was timed at 2-5 ms at load 5.
    const r = await downloadBlob(blob(), { ...ctx(), nearRttMs: 1e-9 });
    expect(r.fetched).toBe(BIG.length);
    expect(rangesAsked()).toEqual([undefined]);
  });

  // Read in place (`llmgw models pull`), and through the pool's blocks as the agent's pulls are (PullContext.sharedLoop).
  for (const sharedLoop of [false, true]) {
    const how = sharedLoop ? ' (a pull sharing its loop: the pool\'s blocks)' : ' (read in place)';
    it(`refuses a flipped byte in a near stream, hashed as it is written, deletes the file and fetches it again${how}`, async () => {
      hub.corrupt.set('w.safetensors', 1);
      const r = await downloadBlob(blob(), ctx(undefined, true, sharedLoop));
      expect(r).toMatchObject({ fetched: 2 * BIG.length, mismatches: 1 });
      expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
      // Flipped both times: refused, and nothing is left under its name or as a partial file to resume from.
      rmSync(join(dir, 'w'));
      hub.corrupt.set('w.safetensors', 2);
      await expect(downloadBlob(blob(), ctx(undefined, true, sharedLoop))).rejects.toThrow(/hash to .* 2 times; the file was deleted/);
      expect(existsSync(join(dir, 'w'))).toBe(false);
      expect(existsSync(join(dir, 'w.incomplete'))).toBe(false);
      expect(rangesAsked()).toEqual([undefined, undefined, undefined, undefined]);
    });

    it(`goes on after a break from what a near stream wrote, a plain prefix with no record, the prefix hashed from the file${how}`, async () => {
      hub.trickle.set('w.safetensors', 16 * 1024);
      const stop = new AbortController();
      const first = downloadBlob(blob(), ctx(stop.signal, true, sharedLoop));
      await waitUntil(() => existsSync(join(dir, 'w.incomplete')) && statSync(join(dir, 'w.incomplete')).size >= 2 * PART);
      stop.abort();
      await expect(first).rejects.toThrow();
      expect(existsSync(join(dir, 'w.prefix'))).toBe(false);
      const kept = statSync(join(dir, 'w.incomplete')).size;
      expect(readFileSync(join(dir, 'w.incomplete')).equals(BIG.subarray(0, kept))).toBe(true);

      hub.trickle.clear();
      hub.requests.length = 0;
      const r = await downloadBlob(blob(), ctx(undefined, true, sharedLoop));
      expect(r).toMatchObject({ resumedFrom: kept, fetched: BIG.length - kept, mismatches: 0 });
      expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
      expect(rangesAsked()).toEqual([`bytes=${kept}-`]);
    });

    it(`goes on from a kept prefix whose bytes on disk were flipped: refused by the digest, never served${how}`, async () => {
      // The prefix is hashed from the file, the rest as it comes: a byte rotten in the kept part is still caught.
      const rotten = Buffer.from(BIG.subarray(0, 3 * PART));
      rotten[PART + 5] ^= 1;
      writeFileSync(join(dir, 'w.incomplete'), rotten);
      const r = await downloadBlob(blob(), ctx(undefined, true, sharedLoop));
      expect(r).toMatchObject({ resumedFrom: 3 * PART, mismatches: 1 });
      expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
      expect(rangesAsked()).toEqual([`bytes=${3 * PART}-`, undefined]);
    });
  }

  it('connects and reads the head before the store is ready, but writes nothing to it until then; a store never ready fails it with nothing written', async () => {
    let ready: () => void = () => {};
    const storeReady = new Promise<void>((r) => {
      ready = r;
    });
    const pending = downloadBlob(blob(), { ...ctx(undefined, true), storeReady });
    await waitUntil(() => rangesAsked().length === 1);
    // Its look-alike below shows the file would be there by now: the pull's record comes first.
    await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(join(dir, 'w.incomplete'))).toBe(false);
    ready();
    await expect(pending).resolves.toMatchObject({ fetched: BIG.length });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);

    rmSync(join(dir, 'w'));
    const refused = Promise.reject(new Error('the record could not be written'));
    refused.catch(() => {});
    await expect(downloadBlob(blob(), { ...ctx(undefined, true), storeReady: refused })).rejects.toThrow('the record could not be written');
    expect(existsSync(join(dir, 'w.incomplete'))).toBe(false);
    expect(existsSync(join(dir, 'w'))).toBe(false);
  });

  it('cuts a kept partial file back only once the store is ready', async () => {
    const partial = Buffer.concat([BIG.subarray(0, 2 * PART), Buffer.alloc(PART)]);
    writeFileSync(join(dir, 'w.incomplete'), partial);
    writeFileSync(join(dir, 'w.prefix'), String(2 * PART));
    let ready: () => void = () => {};
    const storeReady = new Promise<void>((r) => {
      ready = r;
    });
    const pending = downloadBlob(blob(), { ...ctx(), storeReady });
    await new Promise((r) => setTimeout(r, 100));
    expect(statSync(join(dir, 'w.incomplete')).size).toBe(3 * PART);
    expect(rangesAsked()).toEqual([]);
    ready();
    await expect(pending).resolves.toMatchObject({ resumedFrom: 2 * PART });
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
  });

  it('starts over from a prefix record it cannot read, rather than trust a file that may have holes', async () => {
    writeFileSync(join(dir, 'w.incomplete'), Buffer.alloc(3 * PART));
    writeFileSync(join(dir, 'w.prefix'), 'garbage');
    const r = await downloadBlob(blob(), ctx());
    expect(r.resumedFrom).toBe(0);
    expect(readFileSync(join(dir, 'w')).equals(BIG)).toBe(true);
  });
});

describe('downloadBlob through a redirect', () => {
  let cdn: Server;
  let seen: { authorization?: string; range?: string }[];
  beforeAll(async () => {
    // Another origin that redirects every request to the hub, as the hub redirects to its CDN.
    cdn = createServer((req, res) => {
      seen.push({ authorization: req.headers.authorization, range: req.headers.range });
      res.writeHead(302, { location: `${hub.url}${req.url}` }).end();
    });
    await new Promise<void>((r) => cdn.listen(0, '127.0.0.1', r));
  });
  afterAll(() => new Promise<void>((r) => cdn.close(() => r())));

  it('follows it, and sends the hub token only to the origin it was meant for', async () => {
    seen = [];
    const b = blob();
    const port = (cdn.address() as { port: number }).port;
    const r = await downloadBlob({ ...b, url: b.url.replace(hub.url, `http://127.0.0.1:${port}`) }, { ...ctx(), headers: { authorization: 'Bearer hf_secret' } });
    expect(r.fetched).toBe(BIG.length);
    expect(seen.every((s) => s.authorization === 'Bearer hf_secret')).toBe(true);
    expect(hub.downloads('w.safetensors').map((d) => d.authorization)).toEqual(hub.downloads('w.safetensors').map(() => undefined));
  });
});

async function waitUntil(ok: () => boolean): Promise<void> {
  for (;;) {
    try {
      if (ok()) return;
    } catch {
      // not there yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}
