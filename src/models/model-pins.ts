import { readdir, unlink, writeFile } from 'node:fs/promises';
import { makeStoreDir, WRITE_TRUNCATE } from './store-files.js';
import { join } from 'node:path';
import { isNotFound } from '../lib/errno.js';
import { usageError } from '../lib/errors.js';
import { SHARD_ID_PATTERN } from '../lib/shard-id.js';
import type { StoreLayout } from './store-layout.js';

/**
 * A pin says "a live shard uses this model": one file per user,
 * `llmgw/pins/<folder>/<holder>` (a shard id), so two shards of one model
 * each hold their own and the model is evictable only once both let go.
 * Eviction and `models rm` read the pins before touching a model. A pin
 * outlives a crash on purpose: a model kept too long costs disk, one evicted
 * under a running engine costs the engine.
 */
export async function pinModel(layout: StoreLayout, repo: string, holder: string): Promise<void> {
  checkHolder(holder);
  const dir = layout.pinDir(repo);
  await makeStoreDir(layout, dir);
  await writeFile(join(dir, holder), `${process.pid}\n`, { mode: 0o644, flag: WRITE_TRUNCATE });
}

export async function unpinModel(layout: StoreLayout, repo: string, holder: string): Promise<void> {
  checkHolder(holder);
  await unlink(join(layout.pinDir(repo), holder)).catch((err: unknown) => {
    if (!isNotFound(err)) throw err;
  });
}

/** The holders pinning `repo`, sorted; none when the model is unused. */
export async function modelPins(layout: StoreLayout, repo: string): Promise<string[]> {
  try {
    return (await readdir(layout.pinDir(repo))).sort();
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
}

function checkHolder(holder: string): void {
  if (!SHARD_ID_PATTERN.test(holder)) throw usageError(`pin holder ${JSON.stringify(holder)} is not a shard id`);
}
