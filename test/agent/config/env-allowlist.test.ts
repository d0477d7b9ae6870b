import { describe, expect, it } from 'vitest';
import { DEFAULT_ALLOWED_ENV, refuseProfileEnv } from '../../../src/agent/config/env-allowlist.js';

describe('refuseProfileEnv: levers inside the allowed families (security review 2, N2)', () => {
  const lever = (name: string) => refuseProfileEnv(name, DEFAULT_ALLOWED_ENV, 'vllm');
  it.each([
    'NCCL_CONF_FILE',
    'NCCL_DEBUG_FILE',
    'HF_ENDPOINT',
    'HF_TOKEN_PATH',
    'HF_HOME',
    'VLLM_LOGGING_CONFIG_PATH',
    'VLLM_PLUGINS',
    'VLLM_ALLOW_INSECURE_SERIALIZATION',
    'VLLM_SERVER_DEV_MODE',
    'VLLM_ALLOW_RUNTIME_LORA_UPDATING',
    'SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION',
    'TORCH_EXTENSIONS_DIR',
    // Engine-fidelity review 2, N11: compiled code is loaded from under it (V:vllm/compilation/backends.py:1068).
    'VLLM_CACHE_ROOT',
    'VLLM_CONFIG_ROOT',
    // Security review 3, S8: the names the shape missed.
    'TORCH_TRACE',
    'NCCL_COMM_ID',
    'VLLM_DP_MASTER_IP',
    'VLLM_HOST_IP',
    'SGLANG_HOST_IP',
    'NCCL_SOCKET_IFNAME',
    'NCCL_IB_HCA',
    'VLLM_USE_MODELSCOPE',
    'SGLANG_USE_MODELSCOPE',
    'VLLM_LOGGING_STREAM',
    'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD',
    // Security review 4, S8: the shape by kind. TORCH_DTRACE is TORCH_TRACE's directory, TORCH_LOGS_OUT a file
    // torch's loggers append to (torch/_logging/_internal.py, _init_logs); the rest are the next of the same kinds.
    'TORCH_DTRACE',
    'TORCH_LOGS_OUT',
    'HF_DATASETS_OFFLINE',
    'VLLM_TORCH_PROFILER_DIR',
    'SGLANG_TORCH_PROFILER_DIR',
    'TORCH_COMPILE_DEBUG_DIR',
    'VLLM_DEBUG_DUMP_PATH',
    'VLLM_RPC_BASE_PATH',
    'VLLM_PORT',
    'VLLM_DP_MASTER_PORT',
    'VLLM_DP_MASTER_ADDR',
    'NCCL_TOPO_DUMP_FILE',
    'NCCL_GRAPH_DUMP_FILE',
    'VLLM_TRACE_FUNCTION',
    'NCCL_LAUNCH_MODE',
    'TORCH_SOME_OUTPUT',
    'VLLM_OUT_FILE_PREFIX',
    'HF_ASSETS_CACHE',
    'HF_HUB_DOWNLOAD_URLS',
  ])('refuses %s although its family is allowed, naming it and how to allow it', (name) => {
    expect(lever(name)).toBe(
      `profile env sets ${name}, which names a file, directory, endpoint, plugin or switch the engine acts on; a pattern does not allow it: list ${name} itself in engines.vllm.allowed_env`,
    );
  });
  it('takes a lever the operator lists by name', () => {
    expect(refuseProfileEnv('HF_HOME', [...DEFAULT_ALLOWED_ENV, 'HF_HOME'], 'vllm')).toBeUndefined();
  });
  it('still takes the tuning a profile sets: the real engine variables below stay allowed under the shape by kind', () => {
    const tuning = [
      ...['HF_TOKEN', 'HF_HUB_ENABLE_HF_TRANSFER', 'HF_HUB_DOWNLOAD_TIMEOUT', 'HF_HUB_ETAG_TIMEOUT', 'HF_HUB_DISABLE_TELEMETRY', 'HF_HUB_DISABLE_PROGRESS_BARS'],
      ...['VLLM_USE_V1', 'VLLM_ATTENTION_BACKEND', 'VLLM_WORKER_MULTIPROC_METHOD', 'VLLM_LOGGING_LEVEL', 'VLLM_USE_DEEP_GEMM', 'VLLM_ENGINE_ITERATION_TIMEOUT_S', 'VLLM_RPC_TIMEOUT'],
      ...['VLLM_SLEEP_WHEN_IDLE', 'VLLM_ALLREDUCE_USE_SYMM_MEM', 'VLLM_MARLIN_USE_ATOMIC_ADD', 'VLLM_USE_FLASHINFER_SAMPLER', 'VLLM_FUSED_MOE_CHUNK_SIZE'],
      ...['NCCL_DEBUG', 'NCCL_DEBUG_SUBSYS', 'NCCL_IB_TIMEOUT', 'NCCL_NTHREADS', 'NCCL_P2P_DISABLE', 'NCCL_IB_DISABLE', 'NCCL_NVLS_ENABLE', 'NCCL_CUMEM_ENABLE'],
      ...['NCCL_MIN_NCHANNELS', 'NCCL_BUFFSIZE', 'NCCL_SOCKET_NTHREADS', 'NCCL_NSOCKS_PERTHREAD', 'NCCL_IB_GID_INDEX', 'NCCL_NET_GDR_LEVEL', 'NCCL_CROSS_NIC', 'NCCL_ALGO', 'NCCL_PROTO'],
      ...['TORCH_CUDA_ARCH_LIST', 'TORCH_NCCL_ASYNC_ERROR_HANDLING', 'TORCH_NCCL_BLOCKING_WAIT', 'TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC', 'TORCH_LOGS', 'TORCH_SHOW_CPP_STACKTRACES'],
      ...['SGLANG_SET_CPU_AFFINITY', 'SGLANG_ENABLE_JIT_DEEPGEMM', 'OMP_NUM_THREADS', 'CUDA_LAUNCH_BLOCKING', 'TOKENIZERS_PARALLELISM'],
    ];
    expect(tuning.filter((name) => lever(name) !== undefined)).toEqual([]);
  });
  it('refuses HF_HUB_OFFLINE from a profile whatever its value and whatever allowed_env lists: the agent decides offline (security review 4, S8)', () => {
    const why = "profile env sets HF_HUB_OFFLINE, which the agent decides for each start (offline when the model is whole in the node's store); only the operator may set it, in engines.vllm.env";
    expect(lever('HF_HUB_OFFLINE')).toBe(why);
    expect(refuseProfileEnv('HF_HUB_OFFLINE', [...DEFAULT_ALLOWED_ENV, 'HF_HUB_OFFLINE'], 'vllm')).toBe(why);
    // A lever of the shape is still taken when the operator names it.
    expect(refuseProfileEnv('TORCH_LOGS_OUT', [...DEFAULT_ALLOWED_ENV, 'TORCH_LOGS_OUT'], 'vllm')).toBeUndefined();
  });
  it('keeps the plain refusal for a lever outside every family', () => {
    expect(refuseProfileEnv('PYTHON_CONFIG', ['HF_*'], 'sglang')).toBe('profile env sets PYTHON_CONFIG, which engines.sglang.allowed_env does not allow (allowed: HF_*)');
  });
});
