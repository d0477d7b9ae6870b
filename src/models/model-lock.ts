import { TurnQueue } from '../lib/turn-queue.js';
import { makeStoreDir } from './store-files.js';
import { dirname } from 'node:path';
import { abortableSleep } from '../lib/abortable-sleep.js';
import { failure } from '../lib/errors.js';
import { tryLockFile } from '../lib/files/file-lock.js';
import type { StoreLayout } from './store-layout.js';

/** How often a pull waiting for another process's pull of the same model looks again. */
export const MODEL_LOCK_POLL_MS = 200;

export interface HeldModelLock {
  release(): void;
  /** Another holder (a pull in this process or another) was waited for: what it saw of the hub may be old now. */
  waited: boolean;
}

/** In this process: one holder per model at a time, the rest queued (flock is per open file, so it cannot order them). */
const localQueues = new TurnQueue();

/**
 * Takes the model's lock: first this process's queue for it, then an
 * exclusive flock on `llmgw/locks/<folder>.lock`, which the kernel drops
 * when the holder dies (kill -9 included), so a killed pull never leaves a
 * lock to judge stale. This is what makes "one download per model however
 * many ask" hold across processes: a second pull waits here and then finds
 * the blobs present. `onWait` is told once when another process holds it.
 */
export async function lockModel(
  layout: StoreLayout,
  repo: string,
  signal: AbortSignal,
  onWait?: (holderPid: number | undefined) => void,
): Promise<HeldModelLock> {
  const key = layout.lockPath(repo);
  const queued = localQueues.busy(key);
  const endLocal = await localQueues.take(key);
  try {
    signal.throwIfAborted();
    await makeStoreDir(layout, dirname(key));
    let told = false;
    for (;;) {
      const lock = tryLockFile(key);
      if (lock.kind === 'held') {
        return {
          release: () => {
            lock.release();
            endLocal();
          },
          waited: queued || told,
        };
      }
      if (lock.kind === 'unsupported') throw failure(`cannot lock ${key}: ${lock.reason}`);
      if (!told) onWait?.(lock.holderPid);
      told = true;
      await abortableSleep(MODEL_LOCK_POLL_MS, signal);
      signal.throwIfAborted();
    }
  } catch (err) {
    endLocal();
    throw err;
  }
}

/** Takes the lock only if no one holds it: eviction and rm skip a model being pulled rather than wait. */
export async function tryLockModel(layout: StoreLayout, repo: string): Promise<HeldModelLock | undefined> {
  const key = layout.lockPath(repo);
  if (localQueues.busy(key)) return undefined;
  await makeStoreDir(layout, dirname(key));
  const lock = tryLockFile(key);
  if (lock.kind === 'held') return { release: () => lock.release(), waited: false };
  if (lock.kind === 'unsupported') throw failure(`cannot lock ${key}: ${lock.reason}`);
  return undefined;
}
