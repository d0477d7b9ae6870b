import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';

/**
 * vLLM's sleep API (V: at 2f41c894): `POST /sleep?level=N` (mode defaults
 * to abort: in-flight requests are aborted, new ones queue until the wake)
 * and `POST /wake_up[?tags=…]` (V:vllm/entrypoints/serve/dev/sleep/api_router.py:21-48).
 * Level 1 offloads the weights to host RAM and a bare wake brings them back.
 * Level 2 keeps only the model's buffers (V:vllm/device_allocator/sleep_mode_backend.py:120-125;
 * V:vllm/v1/worker/gpu_worker.py:207-217, 241-256): a bare wake serves
 * garbage (vLLM #29341). Its documented wake is three calls: the weights'
 * memory, `POST /collective_rpc {"method":"reload_weights"}`
 * (V:vllm/entrypoints/serve/dev/rpc/api_router.py:23-44), then the KV cache
 * (V:docs/features/sleep_mode.md:98-108).
 */
export const VLLM_SLEEP_API: EngineSleepApi = {
  levels: {
    1: { sleep: { method: 'POST', path: '/sleep?level=1' }, wake: { resume: [{ method: 'POST', path: '/wake_up' }], restore: [] }, hostCopy: true },
    2: {
      sleep: { method: 'POST', path: '/sleep?level=2' },
      wake: {
        resume: [{ method: 'POST', path: '/wake_up?tags=weights' }],
        restore: [
          { method: 'POST', path: '/collective_rpc', body: '{"method":"reload_weights"}' },
          { method: 'POST', path: '/wake_up?tags=kv_cache' },
        ],
      },
      hostCopy: false,
    },
  },
  hostCopyKept: false,
  mustBeIdle: false,
  wakeOnlyAsleep: false,
  healthNeedsModel: false,
  awakeGauge: 'vllm:engine_sleep_state{sleep_state="awake"}',
  asleepQuery: '/is_sleeping',
  levelGauges: { 1: 'vllm:engine_sleep_state{sleep_state="weights_offloaded"}', 2: 'vllm:engine_sleep_state{sleep_state="discard_all"}' },
};
