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
  /**
   * Called before the sleep and after the wake, when the engine takes
   * requests it cannot serve asleep: SGLang's scheduler runs whatever reaches
   * it on the released memory, and only /pause_generation holds new
   * requests (its health checks too) in the tokenizer until
   * /continue_generation (S:python/sglang/srt/managers/tokenizer_manager.py:804-805,
   * 2010-2029; http_server.py:1685-1708, at 71de97b).
   */
  hold?: { pause: SleepCall; resume: SleepCall };
  /**
   * A wake of an engine that is not asleep ends it: SGLang's resume removes
   * each tag from offload_tags with set.remove, a KeyError in the scheduler
   * (S:python/sglang/srt/managers/scheduler_components/weight_updater.py:253-255),
   * and the tree dies. A sleep that failed is then undone only when the
   * engine answered the release.
   */
  wakeOnlyAsleep: boolean;
  /**
   * Whether its health check runs the model (SGLang's /health generates a
   * token by default): it is not probed while asleep, where that would be held
   * (or, unheld, run on released memory).
   */
  healthNeedsModel: boolean;
}

/**
 * vLLM: `POST /sleep?level=N` (mode defaults to abort: in-flight requests are
 * aborted, new ones queue until the wake) and `POST /wake_up`
 * (vllm/frontend/entrypoints/serve/dev/sleep/api_router.py:21-38 at 055e47c).
 * SGLang: `POST /release_memory_occupation` and `/resume_memory_occupation`
 * with `{}` for every tag (S:python/sglang/srt/entrypoints/http_server.py:1482-1503,
 * io_struct.py:1944-1947; the body is required, http_server.py:589-632); it
 * has one kind of release, which keeps nothing on the GPU, so both levels
 * use it. Around it, `POST /pause_generation {"mode":"abort"}` and
 * `/continue_generation {}`: abort, since at 71de97b a retracted request
 * waits in the queue and the release's idle assertion would fail
 * (scheduler.py:4083-4105, 4584-4650).
 */
const APIS: Partial<Record<EngineName, EngineSleepApi>> = {
  vllm: {
    sleep: (level) => ({ method: 'POST', path: `/sleep?level=${level}` }),
    wake: () => ({ method: 'POST', path: '/wake_up' }),
    mustBeIdle: false,
    wakeOnlyAsleep: false,
    healthNeedsModel: false,
  },
  sglang: {
    sleep: () => ({ method: 'POST', path: '/release_memory_occupation', body: '{}' }),
    wake: () => ({ method: 'POST', path: '/resume_memory_occupation', body: '{}' }),
    mustBeIdle: true,
    hold: {
      pause: { method: 'POST', path: '/pause_generation', body: '{"mode":"abort"}' },
      resume: { method: 'POST', path: '/continue_generation', body: '{}' },
    },
    wakeOnlyAsleep: true,
    healthNeedsModel: true,
  },
};

/** The engine's sleep API; undefined for one without (the sim). */
export function engineSleepApi(engine: string): EngineSleepApi | undefined {
  return APIS[engine as EngineName];
}
