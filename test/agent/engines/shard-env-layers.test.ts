import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shardEnv } from '../../../src/agent/engines/shard-launch.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { type FakeExecutables, fakeExecutablesOnPath, shard } from './engine-fixtures.js';

let fake: FakeExecutables;
beforeAll(() => {
  fake = fakeExecutablesOnPath(['vllm']);
});
afterAll(() => fake.restore());

/** What a control plane tried in the third security review (S8): the agent's own variables, set by a profile. */
const HOSTILE = {
  NCCL_SOCKET_IFNAME: 'eth9',
  GLOO_SOCKET_IFNAME: 'eth9',
  NCCL_IB_HCA: '^=mlx5_1',
  VLLM_HOST_IP: '10.66.6.6',
  CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7',
};

describe('a profile cannot override what the agent sets (security review 3, S8)', () => {
  it('keeps the agent interfaces, HCAs, host IP and GPUs over the profile env', () => {
    const engine = new VllmEngine({ command: ['/opt/vllm/bin/vllm', 'serve'] }, 'bond0', { mgmtAddr: '10.1.2.3' });
    const plan = engine.command(shard({ gpuIndices: [2, 3], hcas: ['mlx5_0'], profile: { env: { ...HOSTILE, VLLM_USE_V1: '1' } } }));
    expect(plan.env).toMatchObject({
      NCCL_SOCKET_IFNAME: '=bond0',
      GLOO_SOCKET_IFNAME: 'bond0',
      NCCL_IB_HCA: '=mlx5_0',
      VLLM_HOST_IP: '10.1.2.3',
      CUDA_VISIBLE_DEVICES: '2,3',
      VLLM_USE_V1: '1',
    });
  });

  it("keeps the agent's store and offline variables over the profile's", () => {
    const spec = shard({ profile: { env: { HF_HUB_OFFLINE: '0', VLLM_CACHE_ROOT: '/dev/shm/evil' } } });
    const env = shardEnv(spec, 'lo', {}, spec.profile?.env, { HF_HUB_OFFLINE: '1', VLLM_CACHE_ROOT: '/var/cache/llmgw/compile/vllm' });
    expect(env.HF_HUB_OFFLINE).toBe('1');
    expect(env.VLLM_CACHE_ROOT).toBe('/var/cache/llmgw/compile/vllm');
  });

  it('lets the operator (engines.<name>.env) set them over the agent, as before', () => {
    const spec = shard({ profile: { env: {} } });
    const env = shardEnv(spec, 'lo', { NCCL_SOCKET_IFNAME: 'ib0' }, {}, {});
    expect(env.NCCL_SOCKET_IFNAME).toBe('ib0');
  });
});
