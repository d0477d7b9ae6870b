import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { pageCacheResidency, warmFiles } from '../../src/models/page-cache.js';
import { dropFromPageCache } from '../helpers/drop-page-cache.js';
import { bytes } from './fake-hub.js';

/*
 * Page-cache residency as fincore reads it, and a warm that reads a model's
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
});
