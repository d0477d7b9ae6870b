import { describe, expect, it } from 'vitest';
import { engineApiKey } from '../../../src/agent/engines/engine-api-key.js';

describe('engineApiKey', () => {
  it("takes --api-key over any environment, the last one winning, as vLLM's argparse and register.py:33 do", () => {
    expect(engineApiKey(['serve', 'm', '--api-key', 'a', '--api-key=b'], { VLLM_API_KEY: 'env' }, 'VLLM_API_KEY', { VLLM_API_KEY: 'agent' })).toBe('b');
  });

  it("sees a VLLM_API_KEY the engine inherits from the agent's own environment, which the direct launcher passes through (review §3 N13)", () => {
    expect(engineApiKey(['serve', 'm'], {}, 'VLLM_API_KEY', { VLLM_API_KEY: 'agent-key' })).toBe('agent-key');
  });

  it("lets the plan's value win over the agent's, an empty one included (it turns vLLM's key off)", () => {
    expect(engineApiKey(['serve', 'm'], { VLLM_API_KEY: 'profile' }, 'VLLM_API_KEY', { VLLM_API_KEY: 'agent' })).toBe('profile');
    expect(engineApiKey(['serve', 'm'], { VLLM_API_KEY: '' }, 'VLLM_API_KEY', { VLLM_API_KEY: 'agent' })).toBe('');
  });

  it('reads no environment for an engine without a key variable (SGLang)', () => {
    expect(engineApiKey(['-m', 'sglang.launch_server'], { VLLM_API_KEY: 'x' }, undefined, { VLLM_API_KEY: 'agent' })).toBe('');
  });
});
