import { isInPortRange, type PortRange } from '../../lib/ephemeral-port-range.js';

/**
 * Where the agent looks for a port for a worker rank that needs one and was
 * given none (SGLang rank ≥ 1 serves /health on --port, 30000 by default:
 * S:python/sglang/srt/server_args.py:1277-1278). Just above SGLang's own
 * default, and below Linux's default ephemeral range (32768-60999).
 */
export const WORKER_PORT_FIRST = 30001;
export const WORKER_PORT_LAST = 30999;

/**
 * The first port of WORKER_PORT_FIRST..WORKER_PORT_LAST that no shard holds
 * (`held`, the registry's reservations), that is outside the ephemeral
 * range and that can be bound now; undefined when there is none. The start
 * is then admitted with it, so the registry reserves it like a control
 * plane's http_port: two worker ranks on a node once both took 30000.
 */
export async function chooseWorkerPort(
  held: ReadonlyMap<number, string>,
  isPortFree: (port: number) => Promise<boolean>,
  ephemeral: PortRange | undefined,
): Promise<number | undefined> {
  for (let port = WORKER_PORT_FIRST; port <= WORKER_PORT_LAST; port++) {
    if (held.has(port) || (ephemeral && isInPortRange(port, ephemeral))) continue;
    if (await isPortFree(port)) return port;
  }
  return undefined;
}
