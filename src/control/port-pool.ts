/** The HTTP and leader ports handed to shards when none is configured. */
export const DEFAULT_PORT_RANGE: readonly [number, number] = [18000, 18999];

/**
 * Ports the control plane hands out, unique across the whole cluster rather
 * than per node: several agents on one machine (dev up, the e2e tests) share
 * one port space, and a clash there is an engine that cannot bind.
 */
export class PortPool {
  readonly #first: number;
  readonly #last: number;
  readonly #taken = new Set<number>();
  #next: number;

  constructor(range: readonly [number, number] = DEFAULT_PORT_RANGE) {
    const [first, last] = range;
    if (!Number.isInteger(first) || !Number.isInteger(last) || first < 1 || last > 65535 || first > last) {
      throw new RangeError(`portRange must be two ports with first <= last, got [${first}, ${last}]`);
    }
    this.#first = first;
    this.#last = last;
    this.#next = first;
  }

  /**
   * The next free port, round-robin: a port just given back may still be held
   * by an engine that is shutting down, so it is the last one reused.
   */
  take(): number | undefined {
    const size = this.#last - this.#first + 1;
    for (let i = 0; i < size; i++) {
      const port = this.#next;
      this.#next = port === this.#last ? this.#first : port + 1;
      if (!this.#taken.has(port)) {
        this.#taken.add(port);
        return port;
      }
    }
    return undefined;
  }

  /** Marks a port in use, e.g. one an adopted shard already listens on; ports outside the range are ignored. */
  reserve(port: number): void {
    if (port >= this.#first && port <= this.#last) this.#taken.add(port);
  }

  release(port: number): void {
    this.#taken.delete(port);
  }
}
