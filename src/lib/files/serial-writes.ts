/**
 * The writes of one state file, one at a time, so that the last asked is the
 * one on disk; and their end. close() lets no write start after it and
 * resolves once the last one asked has ended: whoever closes the owner and
 * then exits, or removes the state directory, never races a write still in
 * flight (a test's rmdir failed with ENOTEMPTY when a ledger's temp file
 * landed during it; the agent exits at once after its stop, which cut off a
 * write asked in its last moments).
 */
export class SerialWrites {
  #last: Promise<void> = Promise.resolve();
  #closed = false;

  /** `onError`: what a failed write is (each owner says what its loss costs); it never breaks the chain. */
  constructor(private readonly onError: (err: unknown) => void = () => {}) {}

  /** Runs `write` after every write asked before it; after close(), not at all (what it would write stays in memory). */
  queue(write: () => Promise<void>): Promise<void> {
    if (this.#closed) return this.#last;
    this.#last = this.#last.then(write).catch(this.onError);
    return this.#last;
  }

  /** Resolves once every write asked so far has ended. */
  settled(): Promise<void> {
    return this.#last;
  }

  /** No write starts after this; resolves once the last one asked has ended. */
  close(): Promise<void> {
    this.#closed = true;
    return this.#last;
  }
}
