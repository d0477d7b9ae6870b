import { abortable } from './abortable.js';

/**
 * Turns per key, in this process: each taker waits for those before it and
 * holds its turn until it releases it. What one process's pulls of a model
 * (model-lock.ts) and its pulls that fill the budget (pull-model.ts) queue on.
 */
export class TurnQueue {
  readonly #tails = new Map<string, Promise<void>>();

  /** Whether a turn of `key` is held or waited for. */
  busy(key: string): boolean {
    return this.#tails.has(key);
  }

  /**
   * Resolves with the release of the turn once every turn of `key` taken
   * before has been released. On `signal`'s abort while waiting it rejects
   * with the reason and gives its place up, so those behind are not held.
   */
  async take(key: string, signal?: AbortSignal): Promise<() => void> {
    const before = this.#tails.get(key) ?? Promise.resolve();
    let releaseMine: () => void = () => {};
    const mine = new Promise<void>((resolve) => {
      releaseMine = resolve;
    });
    const tail = before.then(() => mine);
    this.#tails.set(key, tail);
    const release = () => {
      releaseMine();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    };
    try {
      await (signal ? abortable(before, signal) : before);
    } catch (err) {
      release();
      throw err;
    }
    return release;
  }
}
