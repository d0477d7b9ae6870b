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

/**
 * Waits for the node's warm turn and returns its release. `onWait` is told
 * once when another process holds it. Where no lock can be taken (a user
 * other than root, who cannot write the store's lock folder), the warm runs
 * with this process's queue alone: such a user can read the files anyway;
 * the bound is on what the root agent reads for the control plane.
 */
export async function takeWarmTurn(layout: StoreLayout, signal: AbortSignal, onWait?: (holderPid: number | undefined) => void): Promise<() => void> {
  const path = layout.warmLockPath();
  const endLocal = await turns.take(path, signal);
  try {
    await mkdir(dirname(path), { recursive: true }).catch((err: unknown) => {
      if (process.geteuid?.() === 0) throw err;
    });
    let told = false;
    for (;;) {
      signal.throwIfAborted();
      const lock = tryLockFile(path);
      if (lock.kind === 'held') {
        return () => {
          lock.release();
          endLocal();
        };
      }
      if (lock.kind === 'unsupported') {
        if (process.geteuid?.() === 0) throw failure(`cannot lock ${path}: ${lock.reason}`);
        return endLocal;
      }
      if (!told) onWait?.(lock.holderPid);
      told = true;
      await abortableSleep(WARM_LOCK_POLL_MS, signal);
    }
  } catch (err) {
    endLocal();
    throw err;
  }
}

/** Whether a warm of this process holds or waits for the node's turn (tests, metrics). */
export function warmTurnBusy(layout: StoreLayout): boolean {
  return turns.busy(layout.warmLockPath());
}
