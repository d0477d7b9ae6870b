import { isInPortRange, type PortRange } from '../lib/ephemeral-port-range.js';

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
  readonly #avoid?: PortRange;
  readonly #taken = new Set<number>();
  #next: number;

  /**
   * `avoid` is the node's ephemeral port range (see readEphemeralPortRange):
   * those ports are never handed out. A range that lies wholly inside it is
   * refused, since every port in it could be taken by a client connection.
   */
  constructor(range: readonly [number, number] = DEFAULT_PORT_RANGE, avoid?: PortRange) {
    const [first, last] = range;
    if (!Number.isInteger(first) || !Number.isInteger(last) || first < 1 || last > 65535 || first > last) {
      throw new RangeError(`portRange must be two ports with first <= last, got [${first}, ${last}]`);
    }
    if (avoid && avoid.low <= first && last <= avoid.high) {
      throw new RangeError(
        `port range ${first}-${last} lies inside the ephemeral port range ${avoid.low}-${avoid.high} (net.ipv4.ip_local_port_range), where the kernel picks ports for outgoing connections; choose shard ports outside it (e.g. ${DEFAULT_PORT_RANGE.join('-')})`,
      );
    }
    this.#first = first;
    this.#last = last;
    this.#avoid = avoid;
    this.#next = first;
  }

  /** How many ports of the range the ephemeral range takes away (0 when they do not overlap). */
  get avoidedCount(): number {
    if (!this.#avoid) return 0;
    return Math.max(0, Math.min(this.#last, this.#avoid.high) - Math.max(this.#first, this.#avoid.low) + 1);
  }

  #avoided(port: number): boolean {
    return this.#avoid !== undefined && isInPortRange(port, this.#avoid);
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
      if (!this.#taken.has(port) && !this.#avoided(port)) {
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
