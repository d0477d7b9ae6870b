import type { EngineName } from '../config/agent-config.js';

/** One HTTP call to an engine's sleep API. */
export interface SleepCall {
  method: 'POST';
  /** Path and query on the engine's API port. */
  path: string;
  /** JSON body, when the endpoint takes one. */
  body?: string;
}

/** How an engine sleeps and wakes: the calls, and whether it must be idle first. */
export interface EngineSleepApi {
  sleep(level: 1 | 2): SleepCall;
  wake(): SleepCall;
  /**
   * The engine must hold no request when told to sleep. SGLang asserts the
   * server is idle on a release (S:python/sglang/srt/managers/scheduler_components/weight_updater.py:203-205,
   * ENGINES.md (e)), and a failed assertion in the scheduler takes the
   * engine down: the agent refuses the sleep instead.
   */
  mustBeIdle: boolean;
}

/**
 * vLLM: `POST /sleep?level=N` (mode defaults to abort: in-flight requests are
 * aborted, new ones queue until the wake) and `POST /wake_up`
 * (vllm/frontend/entrypoints/serve/dev/sleep/api_router.py:21-38 at 055e47c).
 * SGLang: `POST /release_memory_occupation` and `/resume_memory_occupation`
 * with `{}` for every tag (S:python/sglang/srt/entrypoints/http_server.py:1482-1503,
 * io_struct.py:1944-1947); it has one kind of release, which keeps nothing
 * on the GPU, so both levels use it.
 */
const APIS: Partial<Record<EngineName, EngineSleepApi>> = {
  vllm: {
    sleep: (level) => ({ method: 'POST', path: `/sleep?level=${level}` }),
    wake: () => ({ method: 'POST', path: '/wake_up' }),
    mustBeIdle: false,
  },
  sglang: {
    sleep: () => ({ method: 'POST', path: '/release_memory_occupation', body: '{}' }),
    wake: () => ({ method: 'POST', path: '/resume_memory_occupation', body: '{}' }),
    mustBeIdle: true,
  },
};

/** The engine's sleep API; undefined for one without (the sim). */
export function engineSleepApi(engine: string): EngineSleepApi | undefined {
  return APIS[engine as EngineName];
}
