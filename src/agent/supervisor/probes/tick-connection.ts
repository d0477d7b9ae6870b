import { Agent, type ClientRequestArgs } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { openedBeforeRequest } from './http-probe.js';

/**
 * The one connection of a health tick (health-watch.ts): the connection
 * the port-owner check opened to see that something accepts, handed over
 * (handOver) once the check found the listener the engine's, carries the
 * tick's /health, and /metrics follows on it, kept alive. A tick used to
 * open three: the check's, closed at once, then one per GET; their connects
 * and closes were the agent's largest items beside the floor's at 64 shards
 * (bench figure 16).
 *
 * Each tick's first GET still goes on a connection opened for that tick,
 * as a new client's, and end() closes everything at the tick's end: no
 * connection outlives its tick, so an engine replaced on its port is never
 * asked on the connection of the one before it.
 */
export class TickConnection extends Agent {
  #next: Socket | undefined;

  constructor() {
    super({ keepAlive: true, maxSockets: 1 });
  }

  /** The tick's connection, open already: the first request that needs a connection goes on it. */
  handOver(socket: Socket): void {
    this.#next?.destroy();
    this.#next = socket;
    // Opened before the request: if the engine closed it first, the GET is sent once more on a fresh one (httpGet).
    openedBeforeRequest.add(socket);
  }

  override createConnection(options: ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): Duplex | null | undefined {
    const handed = this.#next;
    this.#next = undefined;
    if (handed && !handed.destroyed) return handed;
    return super.createConnection(options, callback);
  }

  /** Ends the tick: its connection closed, one handed over and never used too. */
  end(): void {
    this.#next?.destroy();
    this.#next = undefined;
    this.destroy();
  }
}
