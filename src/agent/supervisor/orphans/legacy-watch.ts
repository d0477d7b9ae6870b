import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import type { ShardStateFile } from '../../../lib/files/state-file.js';
import { engineAdminApiKey, engineApiKey } from '../../engines/engine-api-key.js';
import { SGLANG_METRICS, SGLANG_PROBE_TIMEOUT_MS } from '../../engines/sglang/sglang-engine.js';
import { SGLANG_SLEEP_API } from '../../engines/sglang/sglang-sleep.js';
import { VLLM_METRICS } from '../../engines/vllm/vllm-engine.js';
import { VLLM_SLEEP_API } from '../../engines/vllm/vllm-sleep.js';

/**
 * The watch of an engine whose state file an older agent wrote: it kept only
 * a running gauge and a token counter. The engine is judged by what this
 * agent knows of it (the profile names it), not by those two names: an
 * SGLang shard adopted across the upgrade would otherwise keep the counter
 * that called long generations stalls until its next restart. The API key
 * is found in the recorded args; one from the operator's engines.<name>.env
 * was not recorded, and readiness of such an engine answers 401 until it is
 * started again by this agent.
 */
export function legacyWatch(f: Pick<ShardStateFile, 'servesHttp' | 'inFlightMetric' | 'generationTokensMetric'> & { spec: StartShard }): EngineWatch {
  const engine = f.spec.profile?.engine ?? '';
  const args = f.spec.profile?.args ?? [];
  const known = engine === 'sglang' ? SGLANG_METRICS : engine === 'vllm' || engine === 'sim' ? VLLM_METRICS : undefined;
  const recorded = {
    runningGauges: f.inFlightMetric ? [f.inFlightMetric] : [],
    inFlightGauges: f.inFlightMetric ? [f.inFlightMetric] : [],
    progressCounters: f.generationTokensMetric ? [f.generationTokensMetric] : [],
  };
  const apiKey = engineApiKey(args, f.spec.profile?.env ?? {}, engine === 'sglang' ? undefined : 'VLLM_API_KEY');
  if (!f.servesHttp) {
    return { healthPort: 0, healthPath: '/health', probeTimeoutMs: 0, readiness: 'health', runningGauges: [], inFlightGauges: [], progressCounters: [], apiKey: '', adminApiKey: '' };
  }
  return {
    healthPort: f.spec.httpPort,
    healthPath: engine === 'sglang' ? '/health_generate' : '/health',
    probeTimeoutMs: engine === 'sglang' ? SGLANG_PROBE_TIMEOUT_MS : 0,
    readiness: 'model-listed',
    ...(known ? { runningGauges: [...known.runningGauges], inFlightGauges: [...known.inFlightGauges], progressCounters: [...known.progressCounters] } : recorded),
    apiKey,
    adminApiKey: engine === 'sglang' ? engineAdminApiKey(args) : '',
  };
}

/**
 * `watch` with the sleep API its engine was launched with. A record written
 * before issue 50 names none: its API rank is given its wing's API of
 * today, by the engine's name (as the agent of then looked it up at every
 * sleep). A worker rank opens no API to sleep through.
 */
export function withLegacySleepApi(watch: EngineWatch, f: Pick<ShardStateFile, 'servesHttp'> & { spec: StartShard }): EngineWatch {
  if (watch.sleepApi !== undefined || !f.servesHttp) return watch;
  const engine = f.spec.profile?.engine ?? '';
  const api: EngineSleepApi | undefined = engine === 'vllm' ? VLLM_SLEEP_API : engine === 'sglang' ? SGLANG_SLEEP_API : undefined;
  return api ? { ...watch, sleepApi: api } : watch;
}
