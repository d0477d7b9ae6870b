import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { mincoreResidency, mincoreUnsupported, residentCount } from '../../src/models/mincore-residency.js';
import { WARM_PART_BYTES, WARM_READ_BYTES, WARM_STREAMS, fincoreResidency, pageCacheResidency, warmFiles } from '../../src/models/page-cache.js';
import { dropFromPageCache } from '../helpers/drop-page-cache.js';
import { bytes } from './fake-hub.js';

/*
 * Page-cache residency as mincore(2) reads it, in this process and through
 * fincore, and a warm that reads a model's
 * files into the cache within its budget (issue 41). The files are dropped
 * from the cache first: synced, then posix_fadvise(DONTNEED) through
 * `dd iflag=nocache`, which this ext4 honours for clean pages.
 */

const dir = mkdtempSync(join(tmpdir(), 'llmgw-page-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MiB = 1024 * 1024;
const files = [0, 1, 2].map((i) => ({ path: join(dir, `shard-${i}.safetensors`), bytes: 4 * MiB }));
const paths = files.map((f) => f.path);


beforeEach(async () => {
  for (const [i, f] of files.entries()) writeFileSync(f.path, bytes(f.bytes, 40 + i));
  await dropFromPageCache(paths);
});

describe('page-cache residency and warming', () => {
  it('reads none of a model cold, all of it once warmed, and says how much it read', async () => {
    const cold = await pageCacheResidency(paths);
    expect(cold.bytes).toBe(12 * MiB);
    // Nothing, or the odd page the kernel read ahead of the drop.
    expect(cold.residentBytes).toBeLessThan(MiB);
    const progress: number[] = [];
    const read = await warmFiles(files, Number.POSITIVE_INFINITY, { onBytes: (n) => progress.push(n) });
    expect(read).toBe(12 * MiB);
    expect(progress.at(-1)).toBe(12 * MiB);
    // One progress report a read: WARM_READ_BYTES each.
    expect(progress).toHaveLength((12 * MiB) / WARM_READ_BYTES);
    expect((await pageCacheResidency(paths)).residentBytes).toBe(12 * MiB);
  });

  it('never reads past its budget: half of one is half in the cache', async () => {
    const read = await warmFiles(files, 6 * MiB);
    expect(read).toBe(6 * MiB);
    const warm = await pageCacheResidency(paths);
    // What was read, and the kernel's read-ahead beyond it, which the warm does not read itself
    // (the device's read_ahead_kb, a window that grows with sequential reads): never the third file.
    expect(warm.residentBytes).toBeGreaterThanOrEqual(6 * MiB);
    expect(warm.residentBytes).toBeLessThanOrEqual(8 * MiB);
    expect((await pageCacheResidency([paths[2] as string])).residentBytes).toBeLessThan(MiB);
  });

  it('reads exactly its budget across files when one is shorter than listed: what was not there goes back to the budget', async () => {
    // Two reads in flight claim the budget before they are asked; a file that ends early gives back what it did not hold.
    writeFileSync(paths[0] as string, bytes(MiB, 40));
    const read = await warmFiles(files, 6 * MiB + 4097);
    expect(read).toBe(6 * MiB + 4097);
    expect((await pageCacheResidency([paths[1] as string])).residentBytes).toBe(4 * MiB);
  });

  it('is stopped by its signal, and refuses to follow a link put in a blob\'s place', async () => {
    const stop = new AbortController();
    stop.abort();
    await expect(warmFiles(files, Number.POSITIVE_INFINITY, { signal: stop.signal })).rejects.toThrow();
    const link = join(dir, 'link');
    await execa('ln', ['-sf', '/etc/hostname', link]);
    await expect(warmFiles([{ path: link, bytes: 1 }], 10)).rejects.toThrow(/ELOOP/);
  });

  it('reads residency in this process as fincore does: none, part of a file read, and a last page counted to the end', async () => {
    expect(mincoreUnsupported()).toBeUndefined();
    const odd = join(dir, 'odd.json');
    // 3 pages and 100 bytes: its last page, once read, counts 100 bytes, as fincore's RES and SIZE are summed.
    writeFileSync(odd, Buffer.alloc(3 * 4096 + 100, 7));
    await dropFromPageCache([odd]);
    const both = async (p: string[]) => [await mincoreResidency(p), await fincoreResidency(p)];
    for (const r of await both([...paths, odd])) expect(r).toEqual({ residentBytes: expect.any(Number), bytes: 12 * MiB + 3 * 4096 + 100 });
    // 1 MiB from the middle of the first file (read-ahead may add a little: measured, not assumed, by both the same).
    const fh = await open(paths[0] as string);
    await fh.read(Buffer.alloc(MiB), 0, MiB, 2 * MiB);
    await fh.close();
    readFileSync(odd);
    // The kernel's read-ahead may still be adding pages: fincore's answer lies between the two taken around it.
    const first = await mincoreResidency([paths[0] as string, odd]);
    const fincore = await fincoreResidency([paths[0] as string, odd]);
    const inProcess = await mincoreResidency([paths[0] as string, odd]);
    expect(fincore.bytes).toBe(inProcess.bytes);
    expect(fincore.residentBytes).toBeGreaterThanOrEqual(first.residentBytes);
    expect(fincore.residentBytes).toBeLessThanOrEqual(inProcess.residentBytes);
    expect(first.residentBytes).toBeGreaterThanOrEqual(MiB + 3 * 4096 + 100);
    // Not the first 2 MiB, before what was read.
    expect(inProcess.residentBytes).toBeLessThan(4 * MiB);
    // The other files were not touched: reading residency maps them and reads nothing in.
    expect(await mincoreResidency([paths[1] as string, paths[2] as string])).toEqual({ residentBytes: expect.any(Number), bytes: 8 * MiB });
    expect((await mincoreResidency([paths[1] as string, paths[2] as string])).residentBytes).toBeLessThan(MiB);
    // Through the entry point the warm uses, the same answer.
    expect((await pageCacheResidency([paths[0] as string, odd])).residentBytes).toBeGreaterThanOrEqual(inProcess.residentBytes);
  });

  it('counts an empty file as none of none, and refuses a link, a missing file and a FIFO with one line each, never hanging', async () => {
    const empty = join(dir, 'empty');
    writeFileSync(empty, '');
    expect(await mincoreResidency([empty])).toEqual({ residentBytes: 0, bytes: 0 });
    const link = join(dir, 'link-to-shard');
    await execa('ln', ['-sf', paths[0] as string, link]);
    await expect(mincoreResidency([link])).rejects.toThrow(/^cannot read the page-cache residency of .*link-to-shard: .*ELOOP/);
    await expect(mincoreResidency([join(dir, 'gone')])).rejects.toThrow(/ENOENT/);
    const fifo = join(dir, 'fifo');
    await execa('mkfifo', ['-m', '600', fifo]);
    await expect(mincoreResidency([fifo])).rejects.toThrow(/fifo: not a regular file/);
  });

  it('counts a page resident by the low bit of its byte alone, four at a time and in the tail, from any offset', () => {
    // mincore's vector: bit 0 resident, the other bits reserved (a kernel may set them): 0xfe is not resident, 0x03 is.
    const bytes = [1, 0, 0xfe, 3, 1, 1, 0, 0xff, 0x80, 1, 0];
    const expected = bytes.filter((b) => b & 1).length;
    for (const offset of [0, 1, 2, 3, 4]) {
      const backing = Buffer.alloc(64, 0xff);
      const vec = backing.subarray(offset, offset + bytes.length);
      vec.set(bytes);
      expect(residentCount(vec, bytes.length)).toBe(expected);
      // Only the first `pages` bytes count, whatever follows them.
      expect(residentCount(vec, 4)).toBe(2);
      expect(residentCount(vec, 0)).toBe(0);
    }
    expect(residentCount(Buffer.alloc(4096, 1), 4096)).toBe(4096);
    expect(residentCount(Buffer.alloc(4096, 0xfe), 4096)).toBe(0);
    // None or all resident, as a warm's reads before and after mostly find: one page apart from either is still seen.
    const allButOne = Buffer.alloc(16384, 1);
    allButOne[9000] = 0;
    expect(residentCount(allButOne, 16384)).toBe(16383);
    allButOne[9000] = 0xfe;
    expect(residentCount(allButOne, 16384)).toBe(16383);
    const noneButOne = Buffer.alloc(16384, 0);
    noneButOne[16383] = 3;
    expect(residentCount(noneButOne, 16384)).toBe(1);
    expect(residentCount(noneButOne, 16383)).toBe(0);
  });

  it('reads many small files one into the next, each closed once read: no descriptor left open, done or failed', async () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const small = Array.from({ length: 40 }, (_, i) => ({ path: join(dir, `small-${i}.json`), bytes: 1000 + i }));
    for (const f of small) writeFileSync(f.path, Buffer.alloc(f.bytes, 1));
    const before = fds();
    expect(await warmFiles([...small, ...files], Number.POSITIVE_INFINITY)).toBe(small.reduce((n, f) => n + f.bytes, 0) + 12 * MiB);
    expect(fds()).toBe(before);
    // One missing among them: the warm fails with its error, and closes what it had opened.
    const missing = { path: join(dir, 'missing.json'), bytes: 100 };
    await expect(warmFiles([...small.slice(0, 20), missing, ...small.slice(20)], Number.POSITIVE_INFINITY)).rejects.toThrow(/ENOENT.*missing\.json/);
    expect(fds()).toBe(before);
    // Stopped by its budget inside a file: that file is closed too.
    expect(await warmFiles(files, 5 * MiB + 3)).toBe(5 * MiB + 3);
    expect(fds()).toBe(before);
  });

  it('reads a file up to the size listed, not past it: the budget it was planned with is what is read', async () => {
    // Listed at 1 MiB (as the store saw it), 4 MiB on disk: the next file follows after its first MiB.
    const read = await warmFiles([{ path: paths[0] as string, bytes: MiB }, files[1] as { path: string; bytes: number }], Number.POSITIVE_INFINITY);
    expect(read).toBe(5 * MiB);
    expect((await pageCacheResidency([paths[1] as string])).residentBytes).toBe(4 * MiB);
  });

  it('reads a large file as parts at once, and exactly its budget when the file ends inside a part, parts past its end given back', async () => {
    // Listed as WARM_STREAMS + 1 parts, holding one and a half: the streams claim the first parts at once, one
    // reads half of its part, another none of one past the end; what they did not read goes to the files after.
    const big = join(dir, 'big.safetensors');
    const held = WARM_PART_BYTES + WARM_PART_BYTES / 2;
    const listed = { path: big, bytes: (WARM_STREAMS + 1) * WARM_PART_BYTES };
    writeFileSync(big, Buffer.alloc(held, 5));
    await dropFromPageCache([big]);
    expect(await warmFiles([listed, ...files], Number.POSITIVE_INFINITY)).toBe(held + 12 * MiB);
    expect((await pageCacheResidency([big, ...paths])).residentBytes).toBe(held + 12 * MiB);
    // With a budget that ends in the next file: the bytes the big one did not hold are spent there, not a byte more.
    await dropFromPageCache([big, ...paths]);
    const budget = held + 3 * MiB + 17;
    expect(await warmFiles([listed, ...files], budget)).toBe(budget);
    expect((await pageCacheResidency([big])).residentBytes).toBe(held);
    expect((await pageCacheResidency([paths[0] as string])).residentBytes).toBeGreaterThanOrEqual(3 * MiB + 17);
    expect((await pageCacheResidency([paths[2] as string])).residentBytes).toBeLessThan(MiB);
  });
});
