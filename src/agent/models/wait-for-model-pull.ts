import { abortable } from '../../lib/abortable.js';
import { failure } from '../../lib/errors.js';
import { lockModel, tryLockModel } from '../../models/model-lock.js';
import type { StoreLayout } from '../../models/store-layout.js';

export interface WaitForModelPullOptions {
  layout: StoreLayout;
  repo: string;
  /** This agent's prefetches of the model (ModelPrefetch.inProgress), which may not hold the lock yet. */
  prefetching: Promise<void> | undefined;
  /** The shard's startup_timeout, and a stop of the shard. */
  signal: AbortSignal;
  /** Told once, when there is a pull to wait for. */
  onWait: () => void;
}

/**
 * Waits until no one pulls `repo` into the store: a prefetch of this agent,
 * or any process holding the model's lock (`llmgw models pull` in a shell).
 * An engine started meanwhile would download the same files beside the
 * pull, into the same cache; once the pull ends it finds them local and,
 * validated then, starts offline. The lock is taken and given back at once:
 * holding it is what a pull does, a wait only needs to know it is free.
 * Whether it waited; throws the signal's reason when it aborts first.
 */
export async function waitForModelPull(o: WaitForModelPullOptions): Promise<boolean> {
  let waited = false;
  if (o.prefetching) {
    o.onWait();
    waited = true;
    await abortable(o.prefetching, o.signal);
  }
  const free = await tryLockModel(o.layout, o.repo);
  if (free) {
    free.release();
    return waited;
  }
  if (!waited) o.onWait();
  // Raced against the signal: lockModel waits for a holder in this process without looking at it.
  const taken = lockModel(o.layout, o.repo, o.signal).then((lock) => lock.release());
  taken.catch(() => {});
  await abortable(taken, o.signal);
  return true;
}

/** The refusal of a start whose model was still being pulled when its startup_timeout ran out. */
export function pullOutlastedStart(repo: string, timeoutMs: number) {
  return failure(
    `${repo} was still being pulled into the model store after ${Number((timeoutMs / 1000).toFixed(1))}s, the shard's startup_timeout; ` +
      'start it again once `llmgw models list` shows it complete, or give it a longer startup_timeout',
  );
}
