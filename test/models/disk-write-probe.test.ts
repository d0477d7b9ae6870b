import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { probeDiskWrite } from '../../src/models/disk-write-probe.js';
import { StoreLayout } from '../../src/models/store-layout.js';

/*
 * The store's disk measured for durable writes (issue 52, item 5): a file
 * of the probe's size written, synced and deleted in the store's own
 * folder, never through a link planted in its place.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-disk-probe-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('probeDiskWrite', () => {
  it('writes and syncs its bytes, says how long that took, and leaves nothing behind', async () => {
    const layout = new StoreLayout(join(root, 'a'));
    const r = await probeDiskWrite(layout, AbortSignal.timeout(30_000), 8 * 1024 * 1024 + 5);
    expect(r.bytes).toBe(8 * 1024 * 1024 + 5);
    expect(r.ms).toBeGreaterThan(0);
    expect(readdirSync(layout.ownDir)).toEqual([]);
  });

  it('refuses a link planted where it writes, and writes nothing through it', async () => {
    const layout = new StoreLayout(join(root, 'b'));
    mkdirSync(layout.ownDir, { recursive: true, mode: 0o755 });
    const target = join(root, 'victim');
    writeFileSync(target, 'kept');
    symlinkSync(target, join(layout.ownDir, `disk-probe.${process.pid}.tmp`));
    await expect(probeDiskWrite(layout, AbortSignal.timeout(30_000), 1024 * 1024)).rejects.toThrow(/EEXIST/);
    expect(readFileSync(target, 'utf8')).toBe('kept');
    // The link is left for the operator to see; the probe made no file of its own.
    expect(existsSync(join(layout.ownDir, `disk-probe.${process.pid}.tmp`))).toBe(true);
  });
});
