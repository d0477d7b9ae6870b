import { isPortFree } from '../agent/engines/is-port-free.js';
import { DEFAULT_PORT_RANGE } from '../control/port-pool.js';
import { failure } from '../lib/errors.js';

/**
 * The port range dev up's control plane hands to shards: the default range
 * from its first port that is free now, together with the `count` after it.
 * A laptop often has something on 18000 (another dev up, a previous run's
 * engine); starting there would cost the newcomer a failed start and a
 * retry before the first answer. A probe, not a reservation: a port taken
 * meanwhile is still caught by the agent and the control plane retries.
 */
export async function findShardPorts(count: number, range: readonly [number, number] = DEFAULT_PORT_RANGE): Promise<[number, number]> {
  const [first, last] = range;
  let run = 0;
  for (let port = first; port <= last; port++) {
    run = (await isPortFree(port)) ? run + 1 : 0;
    if (run === count) return [port - count + 1, last];
  }
  throw failure(`no ${count} free consecutive ports in ${first}-${last} for the engines; stop what listens there and try again`);
}
