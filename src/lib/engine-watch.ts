import { type EngineSleepApi, parseEngineSleepApi } from './engine-sleep-api.js';

/**
 * How the supervisor judges one rank of an engine: where it asks whether the
 * rank is up, how long that question may take, and which of the engine's
 * Prometheus series say how much work it holds and whether that work moves.
 * The engine builds it from the shard (src/agent/engines/); the state file
 * keeps it, so an agent restarted under an engine judges it the same way.
 *
 * Every field comes from what the engine's source does, not from one shape
 * for all: SGLang's health check is a generation that takes a second, its
 * token counter moves once per finished request, its worker ranks serve
 * /health on a port of their own (shared/fixtures/engines/ENGINES.md and
 * shared/reviews/engine-fidelity.md).
 */
export interface EngineWatch {
  /** The port the rank answers probes on (127.0.0.1); 0 when it has none and is judged by staying alive. */
  healthPort: number;
  /** Path whose 200 means the rank works: `/health` (vLLM), `/health_generate` (SGLang's API rank). */
  healthPath: string;
  /**
   * Limit of one health probe, when the engine needs more than the interval
   * gives (SGLang's check sleeps 1 s before it looks); 0: derived from
   * supervisor.health_interval as for any engine.
   */
  probeTimeoutMs: number;
  /** 'model-listed': /health and /v1/models naming the served model; 'health': /health alone (a worker rank). */
  readiness: 'model-listed' | 'health';
  /** Gauges of requests being worked on now, summed: stall detection owes progress while they are above 0. */
  runningGauges: string[];
  /** Gauges summed for a drain's in-flight count: running and waiting, or a drain ends with requests queued. */
  inFlightGauges: string[];
  /** Counters any change of which is progress: tokens generated and prefilled, requests finished. */
  progressCounters: string[];
  /** The engine's API key, sent as a bearer token to /v1 paths only; '' when it has none. Never logged. */
  apiKey: string;
  /**
   * SGLang's --admin-api-key, the key of its ADMIN_OPTIONAL routes (pause and
   * continue generation, release and resume memory, update_weights_from_disk,
   * weights_checker); '' when it has none, and always for vLLM. Its
   * three-way rule (S:python/sglang/srt/utils/auth.py:123-138): with an admin
   * key set those routes take it alone, never the API key; without one they
   * take the API key when one is set, else anyone. So the agent sends
   * `adminApiKey || apiKey` to those routes, and `apiKey` to every other.
   * Never logged. Absent in the records of agents before issue 36: ''.
   */
  adminApiKey: string;
  /**
   * The engine's sleep API (its wing's, Engine.sleepApi), on the rank that
   * opens the API: recorded at launch so that an engine adopted by a later
   * agent keeps the API it was launched with. Absent: it has none (the sim,
   * a worker rank), or the record predates issue 50 (legacy-watch.ts then
   * fills it by the engine's name).
   */
  sleepApi?: EngineSleepApi;
}

const isStringArray = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string');

/** The watch in a state file, or the name of the first field that is not what a watch holds. */
export function parseEngineWatch(raw: unknown): { ok: true; watch: EngineWatch } | { ok: false; field: string } {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return { ok: false, field: 'watch' };
  const w = raw as Record<string, unknown>;
  const port = w.healthPort;
  if (!Number.isInteger(port) || (port as number) < 0 || (port as number) > 65535) return { ok: false, field: 'watch.healthPort' };
  if (typeof w.healthPath !== 'string' || !w.healthPath.startsWith('/')) return { ok: false, field: 'watch.healthPath' };
  if (typeof w.probeTimeoutMs !== 'number' || !(w.probeTimeoutMs >= 0)) return { ok: false, field: 'watch.probeTimeoutMs' };
  if (w.readiness !== 'model-listed' && w.readiness !== 'health') return { ok: false, field: 'watch.readiness' };
  for (const f of ['runningGauges', 'inFlightGauges', 'progressCounters'] as const) {
    if (!isStringArray(w[f])) return { ok: false, field: `watch.${f}` };
  }
  if (typeof w.apiKey !== 'string') return { ok: false, field: 'watch.apiKey' };
  if (w.adminApiKey !== undefined && typeof w.adminApiKey !== 'string') return { ok: false, field: 'watch.adminApiKey' };
  const sleepApi = w.sleepApi === undefined ? undefined : parseEngineSleepApi(w.sleepApi);
  if (w.sleepApi !== undefined && sleepApi === undefined) return { ok: false, field: 'watch.sleepApi' };
  return {
    ok: true,
    watch: {
      healthPort: port as number,
      healthPath: w.healthPath,
      probeTimeoutMs: w.probeTimeoutMs,
      readiness: w.readiness,
      runningGauges: [...(w.runningGauges as string[])],
      inFlightGauges: [...(w.inFlightGauges as string[])],
      progressCounters: [...(w.progressCounters as string[])],
      apiKey: w.apiKey,
      adminApiKey: typeof w.adminApiKey === 'string' ? w.adminApiKey : '',
      ...(sleepApi ? { sleepApi } : {}),
    },
  };
}
