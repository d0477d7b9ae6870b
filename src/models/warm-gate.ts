import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { abortableSleep } from '../lib/abortable-sleep.js';
import { failure } from '../lib/errors.js';
import { tryLockFile } from '../lib/files/file-lock.js';
import { TurnQueue } from '../lib/turn-queue.js';
import type { StoreLayout } from './store-layout.js';

/*
 * One page-cache warm at a time on the node (security review 4, F9): each
 * PrefetchModel{page_cache} started one more full read of its model, each
 * with its own "half of MemAvailable", and a control plane sending one a
 * second kept tens of reads of a large model going at once. A warm now
 * takes the node's one turn: in this process a queue, across processes
 * (the agent and `llmgw models warm`) an flock on
 * <cache_dir>/llmgw/locks/page-cache-warm.lock, which the kernel drops when
 * its holder dies. The budget of the warm that holds it is then the node's:
 * at most half of MemAvailable (or --budget) is being read at any moment.
 * Asks of a model whose warm is in progress join it (warm-model.ts).
 */

/** How often a warm waiting for another process's looks again. */
export const WARM_LOCK_POLL_MS = 200;

const turns = new TurnQueue();

/** The node's warm turn, held until `release`. */
export interface WarmTurn {
  release: () => void;
  /** Whether another warm held the turn when asked (in this process or another): what was judged before may be stale. */
  waited: boolean;
}

/**
 * Waits for the node's warm turn. `onWait` is told once when another
 * process holds it. Where no lock can be taken (a user
 * other than root, who cannot write the store's lock folder), the warm runs
 * with this process's queue alone: such a user can read the files anyway;
 * the bound is on what the root agent reads for the control plane.
 */
export async function takeWarmTurn(layout: StoreLayout, signal: AbortSignal, onWait?: (holderPid: number | undefined) => void): Promise<WarmTurn> {
  const path = layout.warmLockPath();
  let waited = turns.busy(path);
  const endLocal = await turns.take(path, signal);
  try {
    // Made once; tryLockFile below opens the lock file synchronously in it anyway, and an mkdir
    // through libuv's threads each time was a round trip on every warm's way to its reads.
    if (!existsSync(dirname(path))) {
      await mkdir(dirname(path), { recursive: true }).catch((err: unknown) => {
        if (process.geteuid?.() === 0) throw err;
      });
    }
    let told = false;
    for (;;) {
      signal.throwIfAborted();
      const lock = tryLockFile(path);
      if (lock.kind === 'held') {
        const release = () => {
          lock.release();
          endLocal();
        };
        return { release, waited };
      }
      if (lock.kind === 'unsupported') {
        if (process.geteuid?.() === 0) throw failure(`cannot lock ${path}: ${lock.reason}`);
        return { release: endLocal, waited };
      }
      if (!told) onWait?.(lock.holderPid);
      told = true;
      waited = true;
      await abortableSleep(WARM_LOCK_POLL_MS, signal);
    }
  } catch (err) {
    endLocal();
    throw err;
  }
}
