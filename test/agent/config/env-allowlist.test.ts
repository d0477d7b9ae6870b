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
  ])('refuses %s although its family is allowed, naming it and how to allow it', (name) => {
    expect(lever(name)).toBe(
      `profile env sets ${name}, which names a file, directory, endpoint, plugin or switch the engine acts on; a pattern does not allow it: list ${name} itself in engines.vllm.allowed_env`,
    );
  });
  it('takes a lever the operator lists by name', () => {
    expect(refuseProfileEnv('HF_HOME', [...DEFAULT_ALLOWED_ENV, 'HF_HOME'], 'vllm')).toBeUndefined();
  });
  it('still takes the tuning a profile sets', () => {
    for (const name of ['HF_TOKEN', 'VLLM_USE_V1', 'VLLM_ATTENTION_BACKEND', 'NCCL_DEBUG', 'NCCL_IB_TIMEOUT', 'NCCL_NTHREADS', 'TORCH_CUDA_ARCH_LIST', 'SGLANG_SET_CPU_AFFINITY', 'OMP_NUM_THREADS']) {
      expect(lever(name), name).toBeUndefined();
    }
  });
  it('keeps the plain refusal for a lever outside every family', () => {
    expect(refuseProfileEnv('PYTHON_CONFIG', ['HF_*'], 'sglang')).toBe('profile env sets PYTHON_CONFIG, which engines.sglang.allowed_env does not allow (allowed: HF_*)');
  });
});
