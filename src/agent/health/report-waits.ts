/**
 * Waits for a GPU memory loop's next reports (gpu-memory-sampler.ts,
 * readingsAfterNow): each wait ends once every GPU of it has been reported
 * `reports` times since it began, or with false at its limit or on close.
 */
export class ReportWaits {
  readonly #waits = new Set<{ left: Map<number, number>; end: (reported: boolean) => void }>();

  /** True once each of `gpus` has been reported `reports` times from now; false after `limitMs` or at close(). */
  wait(gpus: readonly number[], reports: number, limitMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => wait.end(false), limitMs).unref();
      const wait = {
        left: new Map(gpus.map((g) => [g, reports])),
        end: (reported: boolean) => {
          clearTimeout(timer);
          this.#waits.delete(wait);
          resolve(reported);
        },
      };
      if (wait.left.size === 0) wait.end(true);
      else this.#waits.add(wait);
    });
  }

  /** The loop reported GPU `index`. */
  reported(index: number): void {
    for (const w of this.#waits) {
      const left = w.left.get(index);
      if (left === undefined) continue;
      if (left > 1) w.left.set(index, left - 1);
      else w.left.delete(index);
      if (w.left.size === 0) w.end(true);
    }
  }

  /** Ends every wait with false. */
  close(): void {
    for (const w of this.#waits) w.end(false);
  }
}
