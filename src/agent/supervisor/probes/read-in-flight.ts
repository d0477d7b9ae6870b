import { PROBE_TIMEOUT_MS, httpGet } from './http-probe.js';
import type { PortOwnerCheck } from './port-owner-check.js';
import { readGauges } from './read-gauge.js';

/**
 * Requests the engine at `baseUrl` holds, running and waiting, from its own
 * gauges `metrics` (summed); undefined when it cannot tell. A port held by
 * another process (`portOwner`) cannot tell: a squatter's "0 in flight"
 * would end a drain while the engine still serves.
 */
export async function readInFlight(baseUrl: string, metrics: readonly string[], signal: AbortSignal, portOwner?: PortOwnerCheck): Promise<number | undefined> {
  if (metrics.length === 0) return undefined;
  try {
    const owner = await portOwner?.();
    if (owner && owner.owner !== 'engine' && owner.owner !== 'unknown') return undefined;
    const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal });
    return r.status === 200 ? readGauges(r.body, metrics) : undefined;
  } catch {
    return undefined;
  }
}
