import { lchown, mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * The account the store belongs to: the owner of models.cache_dir, which the
 * operator gives the engine account (README "Warm starts"). A pull run as
 * root gives what it creates to that owner, so engines can write their
 * refs, locks and compile caches beside the blobs; one run as anyone else
 * creates files as itself, and the kernel decides the rest.
 */
export class StoreOwner {
  private constructor(
    private readonly uid: number,
    private readonly gid: number,
    private readonly active: boolean,
  ) {}

  static async of(cacheDir: string): Promise<StoreOwner> {
    await mkdir(cacheDir, { recursive: true, mode: 0o755 });
    const s = await stat(cacheDir);
    const root = process.getuid?.() === 0;
    return new StoreOwner(s.uid, s.gid, root && s.uid !== 0);
  }

  /** Gives `path` (not what a symlink points to) to the owner. */
  async give(path: string): Promise<void> {
    if (this.active) await lchown(path, this.uid, this.gid);
  }

  /** mkdir -p, each folder it creates given to the owner. */
  async mkdir(dir: string): Promise<void> {
    const first = await mkdir(dir, { recursive: true, mode: 0o755 });
    if (first === undefined || !this.active) return;
    for (let d = dir; d.length >= first.length; d = dirname(d)) {
      await this.give(d);
      if (d === first) break;
    }
  }
}
