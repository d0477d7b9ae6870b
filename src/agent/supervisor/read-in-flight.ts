import { PROBE_TIMEOUT_MS, httpGet } from './http-probe.js';
import { readGauge } from './read-gauge.js';

/** Requests the engine at `baseUrl` is working on, from its own gauge `metric`; undefined when it cannot tell. */
export async function readInFlight(baseUrl: string, metric: string, signal: AbortSignal): Promise<number | undefined> {
  try {
    const r = await httpGet(`${baseUrl}/metrics`, { timeoutMs: PROBE_TIMEOUT_MS, signal });
    return r.status === 200 ? readGauge(r.body, metric) : undefined;
  } catch {
    return undefined;
  }
}
