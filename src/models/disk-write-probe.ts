import { randomFillSync } from 'node:crypto';
import { constants } from 'node:fs';
import { open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { makeStoreDir } from './store-files.js';
import type { StoreLayout } from './store-layout.js';

/*
 * The model store's disk rate for durable writes, measured (issue 52, item
 * 5): what a pull's write and sync can reach at best on this node, so its
 * rate reads as a fraction of it. A pull's own rate cannot say it: the link
 * or the hub may be what held it.
 */

/** Bytes a probe writes: enough to pass a disk's write cache warm-up, little beside a model. */
export const DISK_PROBE_BYTES = 64 * 1024 * 1024;
/** What one write takes, as the pull's blocks go to the file. */
const PROBE_BLOCK_BYTES = 4 * 1024 * 1024;

/**
 * Writes `bytes` to a new file in the store's own folder (O_EXCL,
 * O_NOFOLLOW: never through anything planted there) and fdatasyncs it,
 * then deletes it; resolves with the bytes and the time from the first
 * write to the sync's return. Random bytes, so a disk that compresses or
 * skips zeros is not flattered.
 */
export async function probeDiskWrite(layout: StoreLayout, signal: AbortSignal, bytes = DISK_PROBE_BYTES): Promise<{ bytes: number; ms: number }> {
  await makeStoreDir(layout, layout.ownDir);
  const path = join(layout.ownDir, `disk-probe.${process.pid}.tmp`);
  const block = randomFillSync(Buffer.allocUnsafe(Math.min(PROBE_BLOCK_BYTES, bytes)));
  const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    const t0 = performance.now();
    for (let at = 0; at < bytes; at += block.length) {
      signal.throwIfAborted();
      await fh.write(block, 0, Math.min(block.length, bytes - at), at);
    }
    await fh.datasync();
    return { bytes, ms: performance.now() - t0 };
  } finally {
    await fh.close();
    await unlink(path).catch(() => {});
  }
}
