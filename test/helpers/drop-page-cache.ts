import { execa } from 'execa';

/**
 * Takes `files` out of the page cache as a cold node would have them: synced
 * (dirty pages cannot be dropped), then posix_fadvise(DONTNEED) through
 * `dd iflag=nocache count=0`, which ext4 honours for clean pages.
 */
export async function dropFromPageCache(files: readonly string[]): Promise<void> {
  await execa('sync', [...files]);
  for (const f of files) await execa('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none']);
}
