import type { EngineName } from './engine-names.js';

/** One HTTP call to an engine's sleep API. */
export interface SleepCall {
  method: 'POST';
  /** Path and query on the engine's API port. */
  path: string;
  /** JSON body, when the endpoint takes one. */
  body?: string;
}

/**
 * How an engine wakes from one level: `resume` takes its GPU memory back
 * (never made twice on an engine that dies of it: wakeOnlyAsleep);
 * `restore` then puts the weights back where the memory alone does not
 * (calls that are safe to make again).
 */
export interface WakeCalls {
  resume: SleepCall[];
  restore: SleepCall[];
}

/** How an engine sleeps and wakes: the calls, and whether it must be idle first. */
export interface EngineSleepApi {
  sleep(level: 1 | 2): SleepCall;
  /** The calls that wake it from `level`. */
  wake(level: 1 | 2): WakeCalls;
  /**
   * Whether a sleep at `level` keeps a copy of the weights in host RAM: then
   * the host must have room for it (checkHostRam).
   */
  hostCopy(level: 1 | 2): boolean;
  /**
   * The host copy stays pinned after the wake, for the engine's life: its
   * later sleeps need no new room. SGLang's torch_memory_saver pauses with
   * `cudaMallocHost(&metadata.cpu_backup, …)` and its resume keeps the buffer
   * ("currently keep it there to reduce re-alloc time", csrc/core.cpp at
   * 1a565eb). vLLM's CuMemAllocator drops its CPU backup once copied back
   * (V:vllm/device_allocator/cumem.py:341-356).
   */
  hostCopyKept: boolean;
  /**
   * The engine must hold no request when told to sleep. SGLang asserts the
   * server is idle on a release (`assert self.is_fully_idle()` in
   * release_memory_occupation, S:python/sglang/srt/managers/scheduler_components/weight_updater.py:203-205
   * at 71de97b), and a failed assertion in the scheduler takes the engine
   * down: the agent refuses the sleep instead.
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
  /**
   * A /metrics series that is 0 while the engine sleeps, read every health
   * tick so that a sleep the agent did not ask for is seen (security review
   * 3, S6: with sleep mode the engine's /sleep takes no key); undefined when
   * the engine exports none. vLLM: engine_sleep_state's `awake` series
   * (V:vllm/v1/metrics/loggers.py:535-559, 1261-1278).
   */
  awakeGauge?: string;
}

/**
 * vLLM (V: at 2f41c894): `POST /sleep?level=N` (mode defaults to abort:
 * in-flight requests are aborted, new ones queue until the wake) and
 * `POST /wake_up[?tags=…]` (V:vllm/entrypoints/serve/dev/sleep/api_router.py:21-48).
 * Level 1 offloads the weights to host RAM and a bare wake brings them back.
 * Level 2 keeps only the model's buffers (V:vllm/device_allocator/sleep_mode_backend.py:120-125;
 * V:vllm/v1/worker/gpu_worker.py:207-217, 241-256): a bare wake serves
 * garbage (vLLM #29341). Its documented wake is three calls: the weights'
 * memory, `POST /collective_rpc {"method":"reload_weights"}`
 * (V:vllm/entrypoints/serve/dev/rpc/api_router.py:23-44), then the KV cache
 * (V:docs/features/sleep_mode.md:98-108).
 *
 * SGLang (S: at 71de97b): `POST /release_memory_occupation` and
 * `/resume_memory_occupation` with `{}` for every tag
 * (S:python/sglang/srt/entrypoints/http_server.py:1482-1503,
 * io_struct.py:1944-1947; the body is required, http_server.py:589-632).
 * The release keeps the weights only when the engine was started with
 * --enable-weights-cpu-backup (S:python/sglang/srt/server_args.py:3483-3492;
 * model_executor/load_model_utils.py:281-300), which the agent gives every
 * sleep profile (sglang-engine.ts): the flag is the process's, so both
 * levels copy the weights to host RAM and the resume copies them back. No
 * reload from the store: `POST /update_weights_from_disk` (what SGLang's
 * maintainers advise for paused weights without a backup,
 * sgl-project/sglang#6367) also renames the served model to the path it
 * loaded (`self.served_model_name = obj.model_path`,
 * S:python/sglang/srt/managers/tokenizer_manager.py:2099-2103), so a
 * router asking for the served name would be refused or misrouted, and with
 * the backup the weights are already back. The known answer proves they
 * are (known-answer.ts). Around it,
 * `POST /pause_generation {"mode":"abort"}` and `/continue_generation {}`:
 * abort, since at 71de97b a retracted request waits in the queue and the
 * release's idle assertion would fail (scheduler.py:4083-4105, 4584-4650).
 */
const APIS: Partial<Record<EngineName, EngineSleepApi>> = {
  vllm: {
    sleep: (level) => ({ method: 'POST', path: `/sleep?level=${level}` }),
    wake: (level) =>
      level === 1
        ? { resume: [{ method: 'POST', path: '/wake_up' }], restore: [] }
        : {
            resume: [{ method: 'POST', path: '/wake_up?tags=weights' }],
            restore: [
              { method: 'POST', path: '/collective_rpc', body: '{"method":"reload_weights"}' },
              { method: 'POST', path: '/wake_up?tags=kv_cache' },
            ],
          },
    hostCopy: (level) => level === 1,
    hostCopyKept: false,
    mustBeIdle: false,
    wakeOnlyAsleep: false,
    healthNeedsModel: false,
    awakeGauge: 'vllm:engine_sleep_state{sleep_state="awake"}',
  },
  sglang: {
    sleep: () => ({ method: 'POST', path: '/release_memory_occupation', body: '{}' }),
    wake: () => ({ resume: [{ method: 'POST', path: '/resume_memory_occupation', body: '{}' }], restore: [] }),
    hostCopy: () => true,
    hostCopyKept: true,
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
