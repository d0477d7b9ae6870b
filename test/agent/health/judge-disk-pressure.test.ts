import { describe, expect, it } from 'vitest';
import { type DiskReading, judgeDiskPressure } from '../../../src/agent/health/judge-disk-pressure.js';
import { formatBytes } from '../../../src/lib/format-bytes.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const roomy = (key: string, path: string): DiskReading => ({ key, path, freeBytes: 50 * GiB, freeInodes: 900_000, totalInodes: 1_000_000 });
const t = { minFreeBytes: GiB, minFreeInodes: 0.05 };

describe('judgeDiskPressure', () => {
  it('holds no pressure when every directory has room', () => {
    expect(judgeDiskPressure([roomy('log_dir', '/l'), roomy('state_dir', '/s')], t)).toEqual({ active: false, reason: '', keys: [] });
  });

  it('names the directory, its free space and the threshold when space runs short', () => {
    const v = judgeDiskPressure([{ ...roomy('log_dir', '/var/log/llmgw'), freeBytes: 12 * MiB }, roomy('state_dir', '/s')], t);
    expect(v).toEqual({ active: true, reason: 'log_dir /var/log/llmgw has 12 MiB free (< 1 GiB)', keys: ['min_free'] });
  });

  it('judges inodes by share, and both directories when both are short', () => {
    const v = judgeDiskPressure([{ ...roomy('log_dir', '/l'), freeInodes: 10_000 }, { ...roomy('state_dir', '/s'), freeBytes: 0 }], t);
    expect(v.active).toBe(true);
    expect(v.reason).toBe('log_dir /l has 10000 inodes free, 1% (< 5%); state_dir /s has 0 B free (< 1 GiB)');
    expect(v.keys).toEqual(['min_free_inodes', 'min_free']);
  });

  it('ignores inodes on a file system that does not count them (total 0, btrfs) and when the share is 0', () => {
    expect(judgeDiskPressure([{ ...roomy('log_dir', '/l'), freeInodes: 0, totalInodes: 0 }], t).active).toBe(false);
    expect(judgeDiskPressure([{ ...roomy('log_dir', '/l'), freeInodes: 1 }], { ...t, minFreeInodes: 0 }).active).toBe(false);
  });

  it('is not pressure at exactly the threshold', () => {
    expect(judgeDiskPressure([{ ...roomy('log_dir', '/l'), freeBytes: GiB }], t).active).toBe(false);
  });

  it('formats sizes as an operator reads them', () => {
    expect([formatBytes(0), formatBytes(512), formatBytes(1536), formatBytes(12 * MiB), formatBytes(GiB), formatBytes(2.5 * GiB)]).toEqual([
      '0 B',
      '512 B',
      '1.5 KiB',
      '12 MiB',
      '1 GiB',
      '2.5 GiB',
    ]);
  });
});
