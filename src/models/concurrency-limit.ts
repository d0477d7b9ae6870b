/**
 * At most `limit` holders at once (models.max_concurrent); the rest wait in
 * order. A slot is given back however the holder ends.
 */
export class ConcurrencyLimit {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      // The slot passes straight to the next waiter, so active never dips below what runs.
      if (next) next();
      else this.active--;
    }
  }
}
