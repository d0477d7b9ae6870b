import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import type { ShardStateFile } from '../../../lib/files/state-file.js';
import { engineApiKey } from '../../engines/engine-api-key.js';
import { engineKindOf } from '../../engines/engine-catalog.js';
import type { LegacyWatchFacts } from '../../engines/engine-kind.js';

/** A name no wing has: watched as the vLLM-speaking engines were. */
const UNKNOWN_KIND: LegacyWatchFacts = { healthPath: '/health', probeTimeoutMs: 0, apiKeyEnv: 'VLLM_API_KEY' };

/**
 * The watch of an engine whose state file an older agent wrote: it kept only
 * a running gauge and a token counter. The engine is judged by what this
 * agent knows of it (its wing's EngineKind.legacy, by the profile's engine),
 * not by those two names: an SGLang shard adopted across the upgrade would
 * otherwise keep the counter that called long generations stalls until its
 * next restart. The API key is found in the recorded args; one from the
 * operator's engines.<name>.env was not recorded, and readiness of such an
 * engine answers 401 until it is started again by this agent.
 */
export function legacyWatch(f: Pick<ShardStateFile, 'servesHttp' | 'inFlightMetric' | 'generationTokensMetric'> & { spec: StartShard }): EngineWatch {
  const kind = engineKindOf(f.spec.profile?.engine ?? '')?.legacy ?? UNKNOWN_KIND;
  const args = f.spec.profile?.args ?? [];
  const known = kind.metrics;
  const recorded = {
    runningGauges: f.inFlightMetric ? [f.inFlightMetric] : [],
    inFlightGauges: f.inFlightMetric ? [f.inFlightMetric] : [],
    progressCounters: f.generationTokensMetric ? [f.generationTokensMetric] : [],
  };
  const apiKey = engineApiKey(args, f.spec.profile?.env ?? {}, kind.apiKeyEnv);
  if (!f.servesHttp) {
    return { healthPort: 0, healthPath: '/health', probeTimeoutMs: 0, readiness: 'health', runningGauges: [], inFlightGauges: [], progressCounters: [], apiKey: '', adminApiKey: '' };
  }
  return {
    healthPort: f.spec.httpPort,
    healthPath: kind.healthPath,
    probeTimeoutMs: kind.probeTimeoutMs,
    readiness: 'model-listed',
    ...(known ? { runningGauges: [...known.runningGauges], inFlightGauges: [...known.inFlightGauges], progressCounters: [...known.progressCounters] } : recorded),
    apiKey,
    adminApiKey: kind.adminApiKey?.(args) ?? '',
  };
}

/**
 * `watch` with the sleep API its engine was launched with. A record written
 * before issue 50 names none: its API rank is given its wing's API of
 * today (EngineKind.legacy.sleepApi), as the agent of then looked it up at
 * every sleep. A worker rank opens no API to sleep through.
 */
export function withLegacySleepApi(watch: EngineWatch, f: Pick<ShardStateFile, 'servesHttp'> & { spec: StartShard }): EngineWatch {
  if (!f.servesHttp) return watch;
  const api = engineKindOf(f.spec.profile?.engine ?? '')?.legacy.sleepApi;
  if (watch.sleepApi === undefined) return api ? { ...watch, sleepApi: api } : watch;
  // Recorded before the engine's own answer was asked at adoption (adopted-sleep.ts): a read that changes nothing,
  // taken from its wing today, so that an engine launched by the agent before an upgrade is judged as one launched after.
  if (watch.sleepApi.asleepQuery !== undefined || api?.asleepQuery === undefined) return watch;
  return { ...watch, sleepApi: { ...watch.sleepApi, asleepQuery: api.asleepQuery, ...(api.levelGauges ? { levelGauges: api.levelGauges } : {}) } };
}
