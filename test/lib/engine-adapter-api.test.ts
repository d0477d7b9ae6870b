import { describe, expect, it } from 'vitest';
import { SGLANG_ADAPTERS, SGLANG_ADAPTER_API } from '../../src/agent/engines/sglang/sglang-adapters.js';
import { SGLANG_KIND } from '../../src/agent/engines/sglang/sglang-kind.js';
import { SIM_KIND } from '../../src/agent/engines/sim/sim-kind.js';
import { VLLM_ADAPTERS, VLLM_ADAPTER_API, vllmLoraRank } from '../../src/agent/engines/vllm/vllm-adapters.js';
import { VLLM_KIND } from '../../src/agent/engines/vllm/vllm-kind.js';
import { adapterRequestModel, parseEngineAdapterApi } from '../../src/lib/engine-adapter-api.js';

describe('EngineAdapterApi as data', () => {
  it('survives a state file round trip for both engines', () => {
    for (const api of [VLLM_ADAPTER_API, SGLANG_ADAPTER_API]) expect(parseEngineAdapterApi(JSON.parse(JSON.stringify(api)))).toEqual(api);
  });

  it('refuses anything that is not one: a path not absolute, a field that is no identifier, a missing flag, an unknown request model', () => {
    const ok = JSON.parse(JSON.stringify(VLLM_ADAPTER_API)) as Record<string, unknown>;
    expect(parseEngineAdapterApi({ ...ok, load: { path: 'v1/load', nameField: 'lora_name', pathField: 'lora_path' } })).toBeUndefined();
    expect(parseEngineAdapterApi({ ...ok, unload: { path: '/u', nameField: 'lora name' } })).toBeUndefined();
    expect(parseEngineAdapterApi({ ...ok, unloadFreesSlot: undefined })).toBeUndefined();
    expect(parseEngineAdapterApi({ ...ok, requestModel: 'base/name' })).toBeUndefined();
    expect(parseEngineAdapterApi({ ...ok, inFlightMetric: 'a metric' })).toBeUndefined();
    expect(parseEngineAdapterApi('x')).toBeUndefined();
  });

  it('names an adapter in a request as each engine reads it', () => {
    expect(adapterRequestModel(VLLM_ADAPTER_API, 'served', 'a')).toBe('a');
    expect(adapterRequestModel(SGLANG_ADAPTER_API, 'served', 'a')).toBe('served:a');
  });
});

describe('the wings adapters', () => {
  it('vLLM and SGLang have them, the sim none', () => {
    expect(VLLM_KIND.adapters).toBe(VLLM_ADAPTERS);
    expect(SGLANG_KIND.adapters).toBe(SGLANG_ADAPTERS);
    expect(SIM_KIND.adapters).toBeUndefined();
  });

  it('vLLM: --enable-lora --max-loras --max-lora-rank (rounded up to a rank it takes) and the runtime gate', () => {
    expect(VLLM_ADAPTERS.launch({ maxLoaded: 4, maxRank: 16 })).toEqual({
      args: ['--enable-lora', '--max-loras', '4', '--max-lora-rank', '16'],
      env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
    });
    expect(VLLM_ADAPTERS.launch({ maxLoaded: 1, maxRank: 20 }).args.at(-1)).toBe('32');
    expect(vllmLoraRank(513)).toBeUndefined();
  });

  it('SGLang: --max-loaded-loras with --max-loras-per-batch never above it, target modules all', () => {
    expect(SGLANG_ADAPTERS.launch({ maxLoaded: 4, maxRank: 64 }).args).toEqual([
      '--enable-lora', '--max-lora-rank', '64', '--lora-target-modules', 'all', '--max-loaded-loras', '4', '--max-loras-per-batch', '4',
    ]);
    expect(SGLANG_ADAPTERS.launch({ maxLoaded: 20, maxRank: 8 }).args.slice(-2)).toEqual(['--max-loras-per-batch', '8']);
    expect(SGLANG_ADAPTERS.launch({ maxLoaded: 2, maxRank: 8 }).env).toEqual({});
  });

  it('reads the limits a profile sets, however spelt, the last one winning; an unset one stays unset', () => {
    expect(VLLM_ADAPTERS.limitsFromArgs(['--max-loras', '2', '--max_lora_rank=64', '--max-loras=3'])).toEqual({ maxLoaded: 3, maxRank: 64 });
    expect(VLLM_ADAPTERS.limitsFromArgs(['--max-cpu-loras', '8'])).toEqual({});
    expect(SGLANG_ADAPTERS.limitsFromArgs(['--max-loaded-loras', '6', '--max-lora-rank', '32'])).toEqual({ maxLoaded: 6, maxRank: 32 });
    expect(SGLANG_ADAPTERS.limitsFromArgs(['--max-loras-per-batch', '4'])).toEqual({});
  });
});
