import { PROBE_TIMEOUT_MS, httpGet } from './http-probe.js';
import type { PortOwnerCheck } from './port-owner-check.js';
import { readGauge } from './read-gauge.js';

/**
 * Requests the engine at `baseUrl` is working on, from its own gauge
 * `metric`; undefined when it cannot tell. A port held by another process
 * (`portOwner`) cannot tell: a squatter's "0 in flight" would end a drain
 * while the engine still serves.
 */
export async function readInFlight(baseUrl: string, metric: string, signal: AbortSignal, portOwner?: PortOwnerCheck): Promise<number | undefined> {
  try {
    const owner = await portOwner?.();
    if (owner && owner.owner !== 'engine' && owner.owner !== 'unknown') return undefined;
    const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal });
    return r.status === 200 ? readGauge(r.body, metric) : undefined;
  } catch {
    return undefined;
  }
}
